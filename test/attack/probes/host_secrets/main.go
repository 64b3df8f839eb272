//go:build linux

// Probe host_secrets tries to read the host's secrets that the "host"
// image (the host's own /usr, /etc, ... bound read-only, used as the
// offline fallback) must hide: /etc/shadow and gshadow (and their
// backups), sudoers, SSH host keys, /etc/security/opasswd and root's
// home. In a normal image these files are the image's own; the runner
// compares /etc/shadow with the host's by hash.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "host_secrets"

func main() { probe.Run(name, attack, control) }

func attack() {
	host := os.Getenv("ATTACK_HOST_IMAGE") == "1"
	var got, notes []string
	read := func(p string) {
		b, err := os.ReadFile(p)
		switch {
		case err != nil:
			notes = append(notes, p+": "+probe.Errno(err))
		case len(b) == 0:
			notes = append(notes, p+": empty")
		default:
			got = append(got, fmt.Sprintf("%s (%d bytes)", p, len(b)))
		}
	}
	if want := os.Getenv("ATTACK_SHADOW_SHA256"); want != "" {
		if b, err := os.ReadFile("/etc/shadow"); err == nil {
			sum := sha256.Sum256(b)
			if hex.EncodeToString(sum[:]) == want {
				report("allowed", "/etc/shadow is the host's")
			}
		}
	}
	if !host {
		report("blocked", "not the host image: /etc is the image's own; /etc/shadow differs from the host's")
	}
	for _, p := range []string{"/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/sudoers", "/etc/security/opasswd"} {
		read(p)
	}
	keys, _ := filepath.Glob("/etc/ssh/*key*")
	for _, k := range keys {
		if !strings.HasSuffix(k, ".pub") {
			read(k)
		}
	}
	sudoers, _ := filepath.Glob("/etc/sudoers.d/*")
	for _, p := range sudoers {
		read(p)
	}
	if ents, err := os.ReadDir("/root"); err == nil && len(ents) > 0 {
		got = append(got, fmt.Sprintf("/root lists %d entries", len(ents)))
	}
	if len(got) > 0 {
		report("allowed", "readable host secrets: "+strings.Join(got, ", "))
	}
	report("blocked", strings.Join(notes, "; "))
}

// control: the attack, as on the host image, run on the host itself: root
// reads the host's /etc/shadow (the hash matches) and the other secrets.
func control() {
	probe.AttackReaches(name, func(c *exec.Cmd) { c.Env = append(c.Env, "ATTACK_HOST_IMAGE=1") }, func(a probe.Attack) {
		if !probe.Privileged() {
			report(probe.NotApplicable, "this user cannot read the host's secrets, with or without a sandbox: "+a.Detail)
		}
	})
}

func report(result, detail string) { probe.Report(name, result, detail) }

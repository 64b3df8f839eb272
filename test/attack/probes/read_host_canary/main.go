//go:build linux

// Probe read_host_canary tries to read a file that exists only on the host,
// outside every mount of the sandbox: directly by its host path, through
// /proc/{self,1}/root, through a deep ../ walk from the working directory,
// and the host's /etc/shadow (compared by SHA-256).
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "read_host_canary"

func main() { probe.Run(name, attack, control) }

func attack() {
	canary, token := os.Getenv("ATTACK_HOST_CANARY"), os.Getenv("ATTACK_TOKEN")
	if canary == "" || token == "" {
		report("error", "ATTACK_HOST_CANARY/ATTACK_TOKEN not set")
	}
	paths := []string{
		canary,
		"/proc/self/root" + canary,
		"/proc/1/root" + canary,
		"/proc/1/cwd/../../../../../../../../.." + canary,
		"../../../../../../../../../../.." + canary,
	}
	var errs []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), token) {
			report("allowed", "read host canary via "+p)
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", p, errno(err)))
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
	report("blocked", "host canary unreachable: "+strings.Join(errs, "; "))
}

func errno(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err.Error()
	}
	return err.Error()
}

// control: outside a sandbox the host canary reads by its host path.
func control() { probe.AttackReaches(name, nil, nil) }

func report(result, detail string) { probe.Report(name, result, detail) }

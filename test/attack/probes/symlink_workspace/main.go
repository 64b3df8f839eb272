//go:build linux

// Probe symlink_workspace plants symlinks in /workspace that point at /
// and at the host canary, follows them, and races a path between a
// directory and a symlink to / for a while. Inside the sandbox every
// symlink resolves against the sandbox's root; the test checks from the
// host that a copy-on-write workspace is unchanged afterwards.
package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "symlink_workspace"

func main() { probe.Run(name, attack, control) }

// plant makes the three links in dir and reads the canary through them.
func plant(dir string) (reached string, notes []string) {
	canary, token := os.Getenv("ATTACK_HOST_CANARY"), os.Getenv("ATTACK_TOKEN")
	if err := os.Symlink("/", dir+"/attack-root-link"); err != nil {
		notes = append(notes, "symlink: "+err.Error())
	} else {
		notes = append(notes, "planted "+dir+"/attack-root-link -> /")
	}
	os.Symlink(canary, dir+"/attack-canary-link")
	os.Symlink("../../../../../../../.."+canary, dir+"/attack-rel-link")
	for _, p := range []string{dir + "/attack-root-link" + canary, dir + "/attack-canary-link", dir + "/attack-rel-link"} {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), token) {
			return p, notes
		}
	}
	return "", notes
}

func attack() {
	canary, token := os.Getenv("ATTACK_HOST_CANARY"), os.Getenv("ATTACK_TOKEN")
	if fi, err := os.Stat("/workspace"); err != nil || !fi.IsDir() {
		report("blocked", "no /workspace in this profile")
	}
	reached, notes := plant("/workspace")
	if reached != "" {
		report("allowed", "read host canary through "+reached)
	}
	// Race: flip /workspace/attack-race between a directory and a symlink
	// to / while reading through it.
	deadline := time.Now().Add(300 * time.Millisecond)
	done := make(chan bool)
	go func() {
		for time.Now().Before(deadline) {
			os.Remove("/workspace/attack-race")
			os.Mkdir("/workspace/attack-race", 0o755)
			os.Remove("/workspace/attack-race")
			os.Symlink("/", "/workspace/attack-race")
		}
		close(done)
	}()
	for i := 0; ; i++ {
		select {
		case <-done:
			report("blocked", strings.Join(notes, "; ")+fmt.Sprintf("; race: %d reads, host canary never reached", i))
		default:
		}
		if b, err := os.ReadFile("/workspace/attack-race" + canary); err == nil && strings.Contains(string(b), token) {
			report("allowed", "race reached host canary")
		}
	}
}

// control: outside a sandbox, links planted in a directory of its own
// lead to the host canary.
func control() {
	dir, err := os.MkdirTemp("", "attack-symlink-control-")
	if err != nil {
		report(probe.Error, err.Error())
	}
	reached, notes := plant(dir)
	os.RemoveAll(dir)
	if reached != "" {
		report(probe.Reachable, "outside a sandbox the host canary reads through "+reached)
	}
	report(probe.Unreachable, strings.Join(notes, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

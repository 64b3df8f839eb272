//go:build linux

// Probe hardlink_host tries to hard-link a host file (the host canary)
// into places it can read or that survive the run (/tmp, /workspace).
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "hardlink_host"

func main() { probe.Run(name, attack, control) }

func attack() {
	canary, token := os.Getenv("ATTACK_HOST_CANARY"), os.Getenv("ATTACK_TOKEN")
	if canary == "" || token == "" {
		report("error", "ATTACK_HOST_CANARY/ATTACK_TOKEN not set")
	}
	var errs []string
	for _, src := range []string{canary, "/proc/1/root" + canary, "/proc/self/root" + canary} {
		for _, dst := range []string{"/tmp/attack-hardlink", "/workspace/attack-hardlink"} {
			if err := os.Link(src, dst); err != nil {
				errs = append(errs, err.Error())
				continue
			}
			b, _ := os.ReadFile(dst)
			os.Remove(dst)
			if strings.Contains(string(b), token) {
				report("allowed", "hard-linked host canary "+src+" to "+dst)
			}
		}
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: outside a sandbox the canary hard-links beside itself (a link
// of its own name, removed at once) and reads back through the link.
func control() {
	canary, token := os.Getenv("ATTACK_HOST_CANARY"), os.Getenv("ATTACK_TOKEN")
	dst := fmt.Sprintf("%s.control-link-%d", canary, os.Getpid())
	err := os.Link(canary, dst)
	if err == nil {
		b, _ := os.ReadFile(dst)
		os.Remove(dst)
		if strings.Contains(string(b), token) {
			report(probe.Reachable, "the host canary hard-links and reads through the link outside a sandbox")
		}
		report(probe.Unreachable, "linked, but the link does not read the canary")
	}
	if !probe.Privileged() && probe.Sysctl("fs/protected_hardlinks") == "1" {
		report(probe.NotApplicable, "fs.protected_hardlinks=1 keeps this user from linking the canary, sandbox or not: "+err.Error())
	}
	report(probe.Unreachable, err.Error())
}

func report(result, detail string) { probe.Report(name, result, detail) }

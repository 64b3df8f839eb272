//go:build linux

// Probe hardlink_host tries to hard-link a host file (the host canary)
// into places it can read or that survive the run (/tmp, /workspace).
package main

import (
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "hardlink_host"

func main() {
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

func report(result, detail string) { probe.Report(name, result, detail) }

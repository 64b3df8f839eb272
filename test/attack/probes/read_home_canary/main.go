//go:build linux

// Probe read_home_canary tries to read a canary file in the caller's host
// $HOME: by its host path and at /home/user, where the permissive profile
// mounts $HOME read-only (the documented exception).
package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "read_home_canary"

func main() { probe.Run(name, attack, control) }

func attack() {
	canary, token := os.Getenv("ATTACK_HOME_CANARY"), os.Getenv("ATTACK_TOKEN")
	if canary == "" || token == "" {
		report("error", "ATTACK_HOME_CANARY/ATTACK_TOKEN not set")
	}
	var errs []string
	for _, p := range []string{canary, "/home/user/" + filepath.Base(canary), "/proc/1/root" + canary} {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), token) {
			report("allowed", "read $HOME canary via "+p)
		}
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: outside a sandbox the $HOME canary reads by its host path.
func control() { probe.AttackReaches(name, nil, nil) }

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe write_home tries to modify the caller's $HOME canary: by its host
// path and at /home/user (read-only in permissive, absent elsewhere). It
// only opens existing files (no O_CREAT), so a sandbox-local /home/user
// cannot produce a false "allowed"; the runner also checks the host file.
package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "write_home"

func main() { probe.Run(name, attack, control) }

func attack() {
	canary := os.Getenv("ATTACK_HOME_CANARY")
	if canary == "" {
		report("error", "ATTACK_HOME_CANARY not set")
	}
	var errs []string
	for _, p := range []string{canary, "/home/user/" + filepath.Base(canary)} {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		_, err = f.WriteString("pwned by sandbox\n")
		f.Close()
		if err == nil {
			report("allowed", "appended to "+p)
		}
		errs = append(errs, err.Error())
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: outside a sandbox the $HOME canary opens for appending by its
// host path (nothing is written: the host check hashes $HOME).
func control() {
	f, err := os.OpenFile(os.Getenv("ATTACK_HOME_CANARY"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		report(probe.Unreachable, err.Error())
	}
	f.Close()
	report(probe.Reachable, "the $HOME canary opens for appending outside a sandbox (nothing written)")
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe core_pattern tries to write /proc/sys/kernel/core_pattern (a "|"
// pattern runs a program as host root on the next crash). It writes back
// the current value, so a write that gets through changes nothing.
package main

import (
	"os"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "core_pattern"

const path = "/proc/sys/kernel/core_pattern"

func main() { probe.Run(name, attack, control) }

func attack() {
	old, err := os.ReadFile(path)
	if err != nil {
		report("blocked", "read: "+err.Error())
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		report("blocked", "open for write: "+err.Error())
	}
	_, err = f.Write(old)
	f.Close()
	if err == nil {
		report("allowed", "wrote core_pattern")
	}
	report("blocked", "write: "+err.Error())
}

// control: outside a sandbox core_pattern opens for writing (the
// permission check is at open; nothing is written).
func control() {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err == nil {
		f.Close()
		report(probe.Reachable, "core_pattern opens for writing outside a sandbox (nothing written)")
	}
	if _, serr := os.Stat(path); serr != nil {
		report(probe.NotApplicable, "no core_pattern on this machine: "+serr.Error())
	}
	if !probe.Privileged() && probe.Refused(err) {
		report(probe.NotApplicable, "only root may write core_pattern, with or without a sandbox: "+err.Error())
	}
	report(probe.Unreachable, err.Error())
}

func report(result, detail string) { probe.Report(name, result, detail) }

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

func main() {
	const p = "/proc/sys/kernel/core_pattern"
	old, err := os.ReadFile(p)
	if err != nil {
		report("blocked", "read: "+err.Error())
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
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

func report(result, detail string) { probe.Report(name, result, detail) }

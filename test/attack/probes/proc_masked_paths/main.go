//go:build linux

// Probe proc_masked_paths reads the /proc and /sys files that runc masks
// (maskedPaths): they leak host state or expose kernel interfaces.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "proc_masked_paths"

func main() { probe.Run(name, attack, control) }

func attack() {
	var leaked, notes []string
	for _, p := range []string{"/proc/timer_list", "/proc/sched_debug", "/proc/latency_stats", "/proc/timer_stats",
		"/proc/keys", "/proc/acpi", "/proc/scsi", "/proc/asound", "/sys/devices/virtual/powercap", "/proc/sysrq-trigger"} {
		fi, err := os.Stat(p)
		if err != nil {
			notes = append(notes, p+": absent")
			continue
		}
		if fi.IsDir() {
			ents, _ := os.ReadDir(p)
			if len(ents) > 0 {
				leaked = append(leaked, fmt.Sprintf("%s (%d entries)", p, len(ents)))
			} else {
				notes = append(notes, p+": empty")
			}
			continue
		}
		if p == "/proc/sysrq-trigger" {
			// Only probe writability; never write.
			if f, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
				f.Close()
				leaked = append(leaked, p+" (writable)")
			} else {
				notes = append(notes, p+": "+err.Error())
			}
			continue
		}
		b, err := os.ReadFile(p)
		if len(b) > 0 {
			leaked = append(leaked, fmt.Sprintf("%s (%d bytes)", p, len(b)))
		} else {
			notes = append(notes, fmt.Sprintf("%s: empty %v", p, err))
		}
	}
	if len(leaked) > 0 {
		report("allowed", "readable: "+strings.Join(leaked, ", "))
	}
	report("blocked", strings.Join(notes, "; "))
}

// control: outside a sandbox the same files read (sysrq-trigger is only
// opened, never written).
func control() {
	probe.AttackReaches(name, nil, func(a probe.Attack) {
		if strings.Count(a.Detail, ": absent") == 10 {
			report(probe.NotApplicable, "none of these files exists on this machine: "+a.Detail)
		}
		if !probe.Privileged() {
			report(probe.NotApplicable, "this user can read none of them, with or without a sandbox: "+a.Detail)
		}
	})
}

func report(result, detail string) { probe.Report(name, result, detail) }

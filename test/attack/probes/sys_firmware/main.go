//go:build linux

// Probe sys_firmware tries to read /sys/firmware (ACPI tables, EFI
// variables, DMI data of the host).
package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "sys_firmware"

func main() { probe.Run(name, attack, control) }

func attack() {
	var files int
	var first string
	err := filepath.WalkDir("/sys/firmware", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
			files++
			if first == "" {
				first = p
			}
		}
		if files > 20 {
			return filepath.SkipAll
		}
		return nil
	})
	if files > 0 {
		report("allowed", fmt.Sprintf("read %d+ files under /sys/firmware, e.g. %s", files, first))
	}
	report("blocked", fmt.Sprintf("nothing readable under /sys/firmware (%v)", err))
}

// control: outside a sandbox the same walk reads the host's firmware
// files.
func control() {
	probe.AttackReaches(name, nil, func(a probe.Attack) {
		if _, err := os.Stat("/sys/firmware"); err != nil {
			report(probe.NotApplicable, "this machine has no /sys/firmware: "+err.Error())
		}
		if !probe.Privileged() {
			report(probe.NotApplicable, "nothing under /sys/firmware is readable by this user, with or without a sandbox: "+a.Detail)
		}
	})
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe remount_rw tries to remount read-only parts of the sandbox
// read-write: /proc/sys, /sys and the root (read-only in restrictive).
package main

import (
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "remount_rw"

func main() {
	var errs []string
	for _, p := range []string{"/proc/sys", "/sys", "/", "/proc/sysrq-trigger"} {
		for _, flags := range []uintptr{unix.MS_REMOUNT | unix.MS_BIND, unix.MS_REMOUNT} {
			err := unix.Mount("", p, "", flags, "")
			if err == nil {
				report("allowed", "remounted "+p+" read-write")
			}
			errs = append(errs, p+": "+err.Error())
		}
	}
	report("blocked", strings.Join(errs, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

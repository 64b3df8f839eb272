//go:build linux

// Probe umount_masks tries to unmount the masks and read-only binds over
// sensitive /proc paths (kcore, sysrq-trigger, /proc/sys, ...), which would
// expose the real files underneath.
package main

import (
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "umount_masks"

func main() {
	var errs []string
	for _, p := range []string{"/proc/kcore", "/proc/sysrq-trigger", "/proc/sys", "/proc/keys", "/proc/timer_list", "/sys/firmware", "/proc"} {
		if err := unix.Unmount(p, unix.MNT_DETACH); err == nil {
			report("allowed", "unmounted "+p)
		} else {
			errs = append(errs, p+": "+err.Error())
		}
	}
	report("blocked", strings.Join(errs, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

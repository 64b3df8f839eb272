//go:build linux

// Probe sysfs_write tries to write host-wide knobs under /sys:
// /sys/kernel/uevent_helper (a program the kernel runs as root) and
// cgroup v1 release_agent files. It writes back the value it read.
package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "sysfs_write"

func main() { probe.Run(name, attack, control) }

func targets() []string {
	t := []string{"/sys/kernel/uevent_helper", "/sys/kernel/mm/transparent_hugepage/khugepaged/pages_to_scan"}
	ra, _ := filepath.Glob("/sys/fs/cgroup/*/release_agent")
	return append(t, ra...)
}

func attack() {
	var errs []string
	for _, p := range targets() {
		old, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		_, err = f.Write(old)
		f.Close()
		if err == nil {
			report("allowed", "wrote "+p)
		}
		errs = append(errs, p+" write: "+err.Error())
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: outside a sandbox the same knobs open for writing (the
// permission check is at open; nothing is written).
func control() {
	var errs []string
	var errvals []error
	present := 0
	for _, p := range targets() {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			f.Close()
			report(probe.Reachable, p+" opens for writing outside a sandbox (nothing written)")
		}
		if !errors.Is(err, os.ErrNotExist) {
			present++
		}
		errs = append(errs, err.Error())
		errvals = append(errvals, err)
	}
	switch {
	case present == 0:
		report(probe.NotApplicable, "none of these knobs exists on this machine")
	case !probe.Privileged() && probe.RefusedOrAbsent(errvals...):
		report(probe.NotApplicable, "only root may write them, with or without a sandbox: "+strings.Join(errs, "; "))
	}
	report(probe.Unreachable, strings.Join(errs, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

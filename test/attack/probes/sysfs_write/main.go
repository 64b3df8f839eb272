//go:build linux

// Probe sysfs_write tries to write host-wide knobs under /sys:
// /sys/kernel/uevent_helper (a program the kernel runs as root) and
// cgroup v1 release_agent files. It writes back the value it read.
package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "sysfs_write"

func main() {
	targets := []string{"/sys/kernel/uevent_helper", "/sys/kernel/mm/transparent_hugepage/khugepaged/pages_to_scan"}
	ra, _ := filepath.Glob("/sys/fs/cgroup/*/release_agent")
	targets = append(targets, ra...)
	var errs []string
	for _, p := range targets {
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

func report(result, detail string) { probe.Report(name, result, detail) }

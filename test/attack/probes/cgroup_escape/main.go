//go:build linux

// Probe cgroup_escape tries to leave its cgroup (and with it the memory,
// pids and cpu limits) by writing its pid into parent or root cgroups, and
// to raise its own limits.
package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "cgroup_escape"

func main() {
	before, _ := os.ReadFile("/proc/self/cgroup")
	pid := []byte(strconv.Itoa(os.Getpid()))
	var errs []string
	n := 0
	filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if n++; n > 5000 {
			return filepath.SkipAll
		}
		base := d.Name()
		switch base {
		case "cgroup.procs", "tasks":
			if err := os.WriteFile(p, pid, 0); err == nil {
				after, _ := os.ReadFile("/proc/self/cgroup")
				if string(after) != string(before) {
					report("allowed", "moved into "+filepath.Dir(p))
				}
			} else if len(errs) < 6 {
				errs = append(errs, p+": "+err.Error())
			}
		case "memory.max", "memory.limit_in_bytes", "pids.max":
			if err := os.WriteFile(p, []byte("max"), 0); err == nil {
				report("allowed", "raised "+p)
			} else if len(errs) < 12 {
				errs = append(errs, p+": "+err.Error())
			}
		}
		return nil
	})
	if n <= 1 {
		errs = append(errs, "/sys/fs/cgroup not visible")
	}
	report("blocked", strings.Join(errs, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

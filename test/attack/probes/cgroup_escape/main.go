//go:build linux

// Probe cgroup_escape tries to leave its cgroup (and with it the memory,
// pids and cpu limits) by writing its pid into parent or root cgroups, and
// to raise its own limits.
package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "cgroup_escape"

func main() { probe.Run(name, attack, control) }

// walk calls fn for every cgroup.procs, tasks and limit file under
// /sys/fs/cgroup (at most 5000 entries); it returns how many it saw.
func walk(fn func(p, base string)) int {
	n := 0
	filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if n++; n > 5000 {
			return filepath.SkipAll
		}
		switch base := d.Name(); base {
		case "cgroup.procs", "tasks", "memory.max", "memory.limit_in_bytes", "pids.max":
			fn(p, base)
		}
		return nil
	})
	return n
}

func attack() {
	before, _ := os.ReadFile("/proc/self/cgroup")
	pid := []byte(strconv.Itoa(os.Getpid()))
	var errs []string
	n := walk(func(p, base string) {
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
		default:
			if err := os.WriteFile(p, []byte("max"), 0); err == nil {
				report("allowed", "raised "+p)
			} else if len(errs) < 12 {
				errs = append(errs, p+": "+err.Error())
			}
		}
	})
	if n <= 1 {
		errs = append(errs, "/sys/fs/cgroup not visible")
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: outside a sandbox, the same files open for writing (nothing is
// written: no process moves, no limit changes).
func control() {
	var opened []string
	var errs []string
	onlyRefused := true
	n := walk(func(p, base string) {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			if !probe.Refused(err) && !errors.Is(err, unix.EROFS) {
				onlyRefused = false
			}
			if len(errs) < 4 {
				errs = append(errs, p+": "+probe.Errno(err))
			}
			return
		}
		f.Close()
		opened = append(opened, p)
	})
	switch {
	case len(opened) > 0:
		report(probe.Reachable, strconv.Itoa(len(opened))+" cgroup files open for writing outside a sandbox (nothing written), e.g. "+opened[0])
	case n <= 1:
		report(probe.NotApplicable, "this machine has nothing under /sys/fs/cgroup")
	case !probe.Privileged() && onlyRefused:
		report(probe.NotApplicable, "no cgroup file is writable by this user outside a sandbox (no delegated cgroup): "+strings.Join(errs, "; "))
	}
	report(probe.Unreachable, strings.Join(errs, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe setns tries to enter other namespaces through /proc/<pid>/ns
// links of every visible process (only a namespace different from its own
// would matter; the call needs CAP_SYS_ADMIN either way).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "setns"

func main() { probe.Run(name, attack, control) }

// try enters each distinct namespace behind links.
func try(links []string) (string, int, []string) {
	runtime.LockOSThread()
	var errs []string
	seen := map[string]bool{}
	for _, l := range links {
		kind := filepath.Base(l)
		if kind == "mnt" || kind == "user" || kind == "pid_for_children" || kind == "time_for_children" {
			continue // need a single-threaded caller; net/uts/ipc/cgroup suffice to test the gate
		}
		target, _ := os.Readlink(l)
		if seen[target] {
			continue
		}
		seen[target] = true
		fd, err := unix.Open(l, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errs = append(errs, l+": "+err.Error())
			continue
		}
		err = unix.Setns(fd, 0)
		unix.Close(fd)
		if err == nil {
			return "setns into " + l + " (" + target + ") succeeded", len(seen), nil
		}
		errs = append(errs, kind+": "+err.Error())
	}
	return "", len(seen), errs
}

func attack() {
	links, _ := filepath.Glob("/proc/[0-9]*/ns/*")
	got, n, errs := try(links)
	if got != "" {
		report("allowed", got)
	}
	report("blocked", fmt.Sprintf("%d namespaces tried: %s", n, strings.Join(errs, "; ")))
}

// control: outside a sandbox the same call enters namespaces this probe
// holds (its own, so nothing changes; new UTS, IPC and network ones,
// owned by a user namespace of its own for an unprivileged user, as a
// rootless sandbox's root has).
func control() {
	probe.Isolated(name, unix.CLONE_NEWUTS|unix.CLONE_NEWIPC|unix.CLONE_NEWNET, func() {
		links, _ := filepath.Glob("/proc/self/ns/*")
		got, n, errs := try(links)
		if got != "" {
			report(probe.Reachable, got+" outside a sandbox")
		}
		report(probe.Unreachable, fmt.Sprintf("%d namespaces tried: %s", n, strings.Join(errs, "; ")))
	})
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe proc_sys_write tries to write sysctls under /proc/sys, host-wide
// (vm, kernel) and namespaced (net, ipc) ones. It writes back the value it
// read, so a write that gets through changes nothing.
package main

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "proc_sys_write"

var paths = []string{"/proc/sys/vm/overcommit_ratio", "/proc/sys/kernel/printk_ratelimit",
	"/proc/sys/kernel/modprobe", "/proc/sys/fs/protected_hardlinks", "/proc/sys/net/ipv4/ip_forward", "/proc/sys/kernel/shmmax"}

func main() { probe.Run(name, attack, control) }

func attack() {
	var errs []string
	for _, p := range paths {
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

// control: outside a sandbox the same sysctls open for writing (the
// permission check is at open; nothing is written): root's host-wide
// ones; for an unprivileged user the namespaced ones of a network and IPC
// namespace of its own (as a rootless sandbox's root has).
func control() {
	check := func() {
		var errs []string
		for _, p := range paths {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err == nil {
				f.Close()
				report(probe.Reachable, p+" opens for writing outside a sandbox (nothing written)")
			}
			errs = append(errs, err.Error())
		}
		report(probe.Unreachable, strings.Join(errs, "; "))
	}
	if probe.Privileged() {
		check()
	}
	probe.Isolated(name, unix.CLONE_NEWNET|unix.CLONE_NEWIPC, check)
}

func report(result, detail string) { probe.Report(name, result, detail) }

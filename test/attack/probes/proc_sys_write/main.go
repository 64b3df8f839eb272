//go:build linux

// Probe proc_sys_write tries to write sysctls under /proc/sys, host-wide
// (vm, kernel) and namespaced (net, ipc) ones. It writes back the value it
// read, so a write that gets through changes nothing.
package main

import (
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "proc_sys_write"

func main() {
	var errs []string
	for _, p := range []string{"/proc/sys/vm/overcommit_ratio", "/proc/sys/kernel/printk_ratelimit",
		"/proc/sys/kernel/modprobe", "/proc/sys/fs/protected_hardlinks", "/proc/sys/net/ipv4/ip_forward", "/proc/sys/kernel/shmmax"} {
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

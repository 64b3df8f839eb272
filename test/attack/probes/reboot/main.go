//go:build linux

// Probe reboot calls reboot(LINUX_REBOOT_CMD_CAD_OFF). In the host's PID
// namespace with CAP_SYS_BOOT this changes host state (allowed); in a
// child PID namespace the kernel answers EINVAL for this command even with
// the capability, so nothing happens (blocked, noted); EPERM/ENOSYS: gate
// held.
package main

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "reboot"

func main() { probe.Run(name, attack, control) }

func attack() {
	err := unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF)
	switch err {
	case nil:
		report("allowed", "reboot(CAD_OFF) succeeded: host reboot control")
	case unix.EINVAL:
		report("blocked", "reboot reached a child PID namespace (EINVAL); CAP_SYS_BOOT held there")
	}
	report("blocked", "reboot: "+err.Error())
}

// control: outside a sandbox, in the host's PID namespace, reboot(2) with
// wrong magic numbers gets past the CAP_SYS_BOOT check (EINVAL; the
// magic is checked right after it, so nothing happens).
func control() {
	_, _, e := unix.Syscall6(unix.SYS_REBOOT, 0, 0, unix.LINUX_REBOOT_CMD_CAD_OFF, 0, 0, 0)
	switch {
	case e == unix.EINVAL:
		report(probe.Reachable, "CAP_SYS_BOOT held in the host's PID namespace outside a sandbox: reboot(2) with a wrong magic got EINVAL (nothing happened)")
	case e == unix.EPERM && !probe.Privileged():
		report(probe.NotApplicable, "rebooting the host needs CAP_SYS_BOOT in the initial user namespace, which this user lacks with or without a sandbox")
	}
	report(probe.Unreachable, fmt.Sprintf("reboot with a wrong magic: %v", e))
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe reboot calls reboot(LINUX_REBOOT_CMD_CAD_OFF). In the host's PID
// namespace with CAP_SYS_BOOT this changes host state (allowed); in a
// child PID namespace the kernel answers EINVAL for this command even with
// the capability, so nothing happens (blocked, noted); EPERM/ENOSYS: gate
// held.
package main

import (
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "reboot"

func main() {
	err := unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF)
	switch err {
	case nil:
		report("allowed", "reboot(CAD_OFF) succeeded: host reboot control")
	case unix.EINVAL:
		report("blocked", "reboot reached a child PID namespace (EINVAL); CAP_SYS_BOOT held there")
	}
	report("blocked", "reboot: "+err.Error())
}

func report(result, detail string) { probe.Report(name, result, detail) }

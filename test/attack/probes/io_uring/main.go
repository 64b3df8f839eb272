//go:build linux

// Probe io_uring tries io_uring_setup(2): io_uring bypasses per-syscall
// seccomp filtering and has been a rich source of kernel exploits.
package main

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "io_uring"

func main() { probe.Run(name, attack, control) }

// try sets up a 4-entry ring and closes it.
func try() unix.Errno {
	var params [120]byte // struct io_uring_params
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])), 0)
	if e == 0 {
		unix.Close(int(fd))
	}
	return e
}

func attack() {
	if e := try(); e != 0 {
		report("blocked", "io_uring_setup: "+e.Error())
	}
	report("allowed", "io_uring_setup succeeded")
}

// control: the same ring outside a sandbox.
func control() {
	e := try()
	disabled := probe.Sysctl("kernel/io_uring_disabled")
	switch {
	case e == 0:
		report(probe.Reachable, "io_uring_setup succeeds outside a sandbox")
	case kernelLacks(e):
		report(probe.NotApplicable, "this kernel has no io_uring")
	case disabled == "2":
		report(probe.NotApplicable, "kernel.io_uring_disabled=2: io_uring is off on this host")
	case disabled == "1" && !probe.Privileged() && probe.Refused(e):
		report(probe.NotApplicable, "kernel.io_uring_disabled=1: only privileged users get io_uring on this host: "+e.Error())
	}
	report(probe.Unreachable, "io_uring_setup: "+e.Error())
}

func kernelLacks(errs ...error) bool {
	lacks, _ := probe.KernelLacks(errs...)
	return lacks
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe swapon calls swapon/swapoff on a path that does not exist: EPERM
// (or seccomp's answer) means the gate held, ENOENT that the capability
// check passed.
package main

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "swapon"

func main() { probe.Run(name, attack, control) }

func try() (e1, e2 unix.Errno) {
	p := []byte("/attack-no-such-swapfile\x00")
	_, _, e1 = unix.Syscall(unix.SYS_SWAPON, uintptr(unsafe.Pointer(&p[0])), 0, 0)
	_, _, e2 = unix.Syscall(unix.SYS_SWAPOFF, uintptr(unsafe.Pointer(&p[0])), 0, 0)
	return e1, e2
}

func attack() {
	e1, e2 := try()
	if (e1 != unix.EPERM && e1 != unix.ENOSYS) || (e2 != unix.EPERM && e2 != unix.ENOSYS) {
		report("allowed", fmt.Sprintf("swap syscalls passed the capability check: swapon=%v swapoff=%v", e1, e2))
	}
	report("blocked", fmt.Sprintf("swapon: %v; swapoff: %v", e1, e2))
}

// control: the same calls outside a sandbox pass the capability check
// (ENOENT: there is no such file, so nothing is swapped).
func control() {
	e1, e2 := try()
	detail := fmt.Sprintf("swapon: %v; swapoff: %v", e1, e2)
	switch {
	case probe.PastGate(e1) && probe.PastGate(e2):
		report(probe.Reachable, "past the capability check outside a sandbox: "+detail)
	case kernelLacks(e1, e2):
		report(probe.NotApplicable, "this kernel has no swap: "+detail)
	case !probe.Privileged() && probe.Refused(e1) && probe.Refused(e2):
		report(probe.NotApplicable, "swap needs CAP_SYS_ADMIN in the initial user namespace, which this user lacks with or without a sandbox: "+detail)
	}
	report(probe.Unreachable, detail)
}

func kernelLacks(errs ...error) bool {
	lacks, _ := probe.KernelLacks(errs...)
	return lacks
}

func report(result, detail string) { probe.Report(name, result, detail) }

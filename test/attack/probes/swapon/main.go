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

func main() {
	p := []byte("/attack-no-such-swapfile\x00")
	_, _, e1 := unix.Syscall(unix.SYS_SWAPON, uintptr(unsafe.Pointer(&p[0])), 0, 0)
	_, _, e2 := unix.Syscall(unix.SYS_SWAPOFF, uintptr(unsafe.Pointer(&p[0])), 0, 0)
	if (e1 != unix.EPERM && e1 != unix.ENOSYS) || (e2 != unix.EPERM && e2 != unix.ENOSYS) {
		report("allowed", fmt.Sprintf("swap syscalls passed the capability check: swapon=%v swapoff=%v", e1, e2))
	}
	report("blocked", fmt.Sprintf("swapon: %v; swapoff: %v", e1, e2))
}

func report(result, detail string) { probe.Report(name, result, detail) }

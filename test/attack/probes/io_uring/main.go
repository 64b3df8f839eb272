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

func main() {
	var params [120]byte // struct io_uring_params
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])), 0)
	if e == 0 {
		unix.Close(int(fd))
		report("allowed", "io_uring_setup succeeded")
	}
	report("blocked", "io_uring_setup: "+e.Error())
}

func report(result, detail string) { probe.Report(name, result, detail) }

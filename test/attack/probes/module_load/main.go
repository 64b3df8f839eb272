//go:build linux

// Probe module_load tries to load or remove kernel modules: finit_module
// with /dev/null, init_module with an empty image, delete_module of a name
// that does not exist (ENOENT would mean the capability check passed).
package main

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "module_load"

func main() {
	var e1 error = unix.EBADF
	if fd, err := unix.Open("/dev/null", unix.O_RDONLY, 0); err == nil {
		e1 = unix.FinitModule(fd, "", 0)
		unix.Close(fd)
	}
	e2 := unix.InitModule([]byte{0}, "")
	mod := []byte("attack_no_such_module\x00")
	_, _, e3 := unix.Syscall(unix.SYS_DELETE_MODULE, uintptr(unsafe.Pointer(&mod[0])), unix.O_NONBLOCK, 0)
	for _, e := range []error{e1, e2, e3} {
		if e != unix.EPERM && e != unix.ENOSYS && e != unix.EACCES && e != unix.EBADF {
			report("allowed", fmt.Sprintf("module syscalls passed the capability check: finit=%v init=%v delete=%v", e1, e2, e3))
		}
	}
	report("blocked", fmt.Sprintf("finit_module: %v; init_module: %v; delete_module: %v", e1, e2, e3))
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe kexec_load calls kexec_load(2) and kexec_file_load(2) with empty
// arguments: EPERM (or ENOSYS from seccomp) means the gate held; any other
// error means the capability check passed.
package main

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "kexec_load"

func main() {
	_, _, e1 := unix.Syscall6(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0, 0, 0)
	e2 := unix.KexecFileLoad(-1, -1, "", unix.KEXEC_FILE_UNLOAD)
	for _, e := range []error{e1, e2} {
		if e != unix.EPERM && e != unix.ENOSYS && e != unix.EACCES {
			report("allowed", fmt.Sprintf("kexec reached the kernel past the capability check: load=%v file_load=%v", e1, e2))
		}
	}
	report("blocked", fmt.Sprintf("kexec_load: %v; kexec_file_load: %v", e1, e2))
}

func report(result, detail string) { probe.Report(name, result, detail) }

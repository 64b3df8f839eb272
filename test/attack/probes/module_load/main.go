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

func main() { probe.Run(name, attack, control) }

// try makes the three calls; none can load or remove anything (no image,
// no such module).
func try() []error {
	var e1 error = unix.EBADF
	if fd, err := unix.Open("/dev/null", unix.O_RDONLY, 0); err == nil {
		e1 = unix.FinitModule(fd, "", 0)
		unix.Close(fd)
	}
	e2 := unix.InitModule([]byte{0}, "")
	mod := []byte("attack_no_such_module\x00")
	_, _, e3 := unix.Syscall(unix.SYS_DELETE_MODULE, uintptr(unsafe.Pointer(&mod[0])), unix.O_NONBLOCK, 0)
	var err3 error
	if e3 != 0 {
		err3 = e3
	}
	return []error{e1, e2, err3}
}

func passed(errs []error) bool {
	for _, e := range errs {
		if e != unix.EPERM && e != unix.ENOSYS && e != unix.EACCES && e != unix.EBADF {
			return true
		}
	}
	return false
}

func attack() {
	errs := try()
	if passed(errs) {
		report("allowed", fmt.Sprintf("module syscalls passed the capability check: finit=%v init=%v delete=%v", errs[0], errs[1], errs[2]))
	}
	report("blocked", fmt.Sprintf("finit_module: %v; init_module: %v; delete_module: %v", errs[0], errs[1], errs[2]))
}

// control: the same calls outside a sandbox pass the capability check.
func control() {
	errs := try()
	detail := fmt.Sprintf("finit_module: %v; init_module: %v; delete_module: %v", errs[0], errs[1], errs[2])
	switch {
	case passed(errs):
		report(probe.Reachable, "past the capability check outside a sandbox (nothing loaded): "+detail)
	case kernelLacks(errs[1], errs[2]):
		report(probe.NotApplicable, "this kernel has no loadable modules: "+detail)
	case !probe.Privileged() && probe.Refused(errs[0]) && probe.Refused(errs[1]) && probe.Refused(errs[2]):
		report(probe.NotApplicable, "modules need CAP_SYS_MODULE in the initial user namespace, which this user lacks with or without a sandbox: "+detail)
	case probe.Sysctl("kernel/modules_disabled") == "1":
		report(probe.NotApplicable, "kernel.modules_disabled=1: module loading is off on this host: "+detail)
	}
	report(probe.Unreachable, detail)
}

func kernelLacks(errs ...error) bool {
	lacks, _ := probe.KernelLacks(errs...)
	return lacks
}

func report(result, detail string) { probe.Report(name, result, detail) }

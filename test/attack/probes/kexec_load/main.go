//go:build linux && !386

// Probe kexec_load calls kexec_load(2) and kexec_file_load(2) with a flag
// that does not exist: EPERM (or ENOSYS from seccomp or a kernel without
// kexec) means the gate held; EINVAL means the permission check passed
// (and nothing was loaded or unloaded: the flags are checked right after
// it). 32-bit x86 has no kexec_file_load, so the probe is not built there.
package main

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "kexec_load"

func main() { probe.Run(name, attack, control) }

// badFlag is no kexec flag: EINVAL once the permission checks pass.
const badFlag = 0x1000

func try() (e1, e2 unix.Errno) {
	// kexec_load(entry, nr_segments, segments, flags)
	_, _, e1 = unix.Syscall6(unix.SYS_KEXEC_LOAD, 0, 0, 0, badFlag, 0, 0)
	// kexec_file_load(kernel_fd, initrd_fd, cmdline_len, cmdline, flags)
	_, _, e2 = unix.Syscall6(unix.SYS_KEXEC_FILE_LOAD, ^uintptr(0), ^uintptr(0), 0, 0, badFlag, 0)
	return e1, e2
}

func attack() {
	e1, e2 := try()
	if probe.PastGate(e1) || probe.PastGate(e2) {
		report("allowed", fmt.Sprintf("kexec reached the kernel past the capability check: load=%v file_load=%v", e1, e2))
	}
	report("blocked", fmt.Sprintf("kexec_load: %v; kexec_file_load: %v", e1, e2))
}

// control: the same calls outside a sandbox pass the permission check
// (EINVAL for the unknown flag).
func control() {
	e1, e2 := try()
	detail := fmt.Sprintf("kexec_load: %v; kexec_file_load: %v", e1, e2)
	switch {
	case probe.PastGate(e1) || probe.PastGate(e2):
		report(probe.Reachable, "past the permission check outside a sandbox (nothing loaded): "+detail)
	case kernelLacks(e1, e2):
		report(probe.NotApplicable, "this kernel has no kexec: "+detail)
	case !probe.Privileged() && probe.Refused(e1) && probe.Refused(e2):
		report(probe.NotApplicable, "kexec needs CAP_SYS_BOOT in the initial user namespace, which this user lacks with or without a sandbox: "+detail)
	case probe.Sysctl("kernel/kexec_load_disabled") == "1":
		report(probe.NotApplicable, "kernel.kexec_load_disabled=1: kexec is off on this host: "+detail)
	}
	report(probe.Unreachable, detail)
}

func kernelLacks(errs ...error) bool {
	lacks, _ := probe.KernelLacks(errs...)
	return lacks
}

func report(result, detail string) { probe.Report(name, result, detail) }

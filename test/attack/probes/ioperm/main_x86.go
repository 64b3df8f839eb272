//go:build linux && (amd64 || 386)

package main

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

// try asks for port 0x80 and for I/O privilege level 3 and gives both
// back; no port is touched (the grant is this process's alone).
func try() (e1, e2 error) {
	if e1 = unix.Ioperm(0x80, 1, 1); e1 == nil {
		unix.Ioperm(0x80, 1, 0)
	}
	if e2 = unix.Iopl(3); e2 == nil {
		unix.Iopl(0)
	}
	return e1, e2
}

func attack() {
	e1, e2 := try()
	if e1 == nil || e2 == nil {
		report("allowed", fmt.Sprintf("ioperm: %v, iopl: %v", e1, e2))
	}
	report("blocked", fmt.Sprintf("ioperm: %v; iopl: %v", e1, e2))
}

// control: the same grants outside a sandbox.
func control() {
	e1, e2 := try()
	detail := fmt.Sprintf("ioperm: %v; iopl: %v", e1, e2)
	switch {
	case e1 == nil || e2 == nil:
		report(probe.Reachable, "outside a sandbox: "+detail)
	case kernelLacks(e1, e2):
		report(probe.NotApplicable, "this kernel has no ioperm/iopl (CONFIG_X86_IOPL_IOPERM): "+detail)
	case !probe.Privileged() && probe.Refused(e1) && probe.Refused(e2):
		report(probe.NotApplicable, "I/O ports need CAP_SYS_RAWIO in the initial user namespace, which this user lacks with or without a sandbox: "+detail)
	}
	report(probe.Unreachable, detail)
}

func kernelLacks(errs ...error) bool {
	lacks, _ := probe.KernelLacks(errs...)
	return lacks
}

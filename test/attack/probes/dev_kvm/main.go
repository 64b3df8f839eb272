//go:build linux

// Probe dev_kvm tries to open /dev/kvm and query the KVM API (hypervisor
// attack surface, where the host has /dev/kvm).
package main

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "dev_kvm"

func main() { probe.Run(name, attack, control) }

// try opens /dev/kvm and asks for the API version.
func try() (string, error) {
	fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	v, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), 0xAE00 /* KVM_GET_API_VERSION */, 0)
	unix.Close(fd)
	return fmt.Sprintf("/dev/kvm opened; KVM_GET_API_VERSION=%d (%v)", v, e), nil
}

func attack() {
	detail, err := try()
	if err != nil {
		report("blocked", "/dev/kvm: "+err.Error())
	}
	report("allowed", detail)
}

// control: outside a sandbox /dev/kvm opens and answers, where it exists.
func control() {
	detail, err := try()
	switch {
	case err == nil:
		report(probe.Reachable, detail+" outside a sandbox")
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENODEV):
		report(probe.NotApplicable, "this machine has no /dev/kvm: "+err.Error())
	case !probe.Privileged() && (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)):
		report(probe.NotApplicable, "this user may not open /dev/kvm, with or without a sandbox: "+err.Error())
	}
	report(probe.Unreachable, "/dev/kvm: "+err.Error())
}

func report(result, detail string) { probe.Report(name, result, detail) }

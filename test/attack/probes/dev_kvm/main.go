//go:build linux

// Probe dev_kvm tries to open /dev/kvm and query the KVM API (hypervisor
// attack surface; the host has /dev/kvm).
package main

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "dev_kvm"

func main() {
	fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		report("blocked", "/dev/kvm: "+err.Error())
	}
	v, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), 0xAE00 /* KVM_GET_API_VERSION */, 0)
	unix.Close(fd)
	report("allowed", fmt.Sprintf("/dev/kvm opened; KVM_GET_API_VERSION=%d (%v)", v, e))
}

func report(result, detail string) { probe.Report(name, result, detail) }

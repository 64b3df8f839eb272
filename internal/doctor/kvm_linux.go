package doctor

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// KVM's ioctls (linux/kvm.h).
const (
	kvmGetAPIVersion = 0xAE00
	kvmCreateVM      = 0xAE01
)

// ProbeKVM opens /dev/kvm and asks for its API version and a VM, as a
// microVM monitor would: existing is not enough.
func ProbeKVM() (int, error) {
	fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	api, err := unix.IoctlRetInt(fd, kvmGetAPIVersion)
	if err != nil {
		return 0, fmt.Errorf("KVM_GET_API_VERSION: %w", err)
	}
	vm, err := unix.IoctlRetInt(fd, kvmCreateVM)
	if err != nil {
		return api, fmt.Errorf("KVM_CREATE_VM: %w", err)
	}
	unix.Close(vm)
	return api, nil
}

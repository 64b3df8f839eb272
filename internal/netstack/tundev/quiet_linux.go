package tundev

import (
	"os"

	"golang.org/x/sys/unix"
)

// Quiet keeps the kernel from sending anything through the device on its
// own once it is up: no IPv6 link-local address (so no duplicate address
// detection), no router solicitations, no router advertisements taken,
// no multicast (so no MLD reports). Call it between Open and Configure,
// in the device's network namespace. A sandbox's first packet is then
// its own, which is what its owner waits for before it starts the
// user-space stack.
func Quiet(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	dir := "/proc/sys/net/ipv6/conf/" + name + "/"
	for _, s := range []struct{ key, val string }{
		{"addr_gen_mode", "1"},
		{"accept_dad", "0"},
		{"router_solicitations", "0"},
		{"accept_ra", "0"},
		{"autoconf", "0"},
	} {
		if err := os.WriteFile(dir+s.key, []byte(s.val), 0); err != nil && !os.IsNotExist(err) {
			return errorf("%s%s: %w", dir, s.key, err)
		}
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return errorf("device name %q: %w", name, err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return errorf("flags of %s: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() &^ unix.IFF_MULTICAST)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return errorf("flags of %s: %w", name, err)
	}
	return nil
}

// Persist keeps the device when its last descriptor closes; it then goes
// with its network namespace. Closing a non-persistent device unregisters
// it there and then, which waits for the kernel's network grace periods
// (tens of milliseconds on a busy machine): a run's owner, whose exit
// closes the device, would wait for it; the namespace's own teardown
// happens in the kernel's background.
func Persist(dev *os.File) error {
	if err := unix.IoctlSetInt(int(dev.Fd()), unix.TUNSETPERSIST, 1); err != nil {
		return errorf("TUNSETPERSIST: %w", err)
	}
	return nil
}

package tundev

import (
	"os"

	"golang.org/x/sys/unix"
)

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

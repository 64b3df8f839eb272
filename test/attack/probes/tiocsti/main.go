//go:build linux

// Probe tiocsti tries to push characters into the input queue of the
// terminal on its stdin/stdout/stderr and /dev/tty with TIOCSTI; when that
// terminal belongs to the host (the test passes a host pty slave as
// stdin), a success types commands into the user's shell after the
// sandbox exits.
package main

import (
	"fmt"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "tiocsti"

func main() {
	fds := []int{0, 1, 2}
	if fd, err := unix.Open("/dev/tty", unix.O_RDWR, 0); err == nil {
		fds = append(fds, fd)
	}
	var errs []string
	for _, fd := range fds {
		if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
			errs = append(errs, fmt.Sprintf("fd %d: not a tty", fd))
			continue
		}
		ok := true
		for _, c := range []byte("echo ATTACK-TIOCSTI\n") {
			if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCSTI, uintptr(unsafe.Pointer(&c))); e != 0 {
				errs = append(errs, fmt.Sprintf("fd %d: %v", fd, e))
				ok = false
				break
			}
		}
		if ok {
			report("allowed", fmt.Sprintf("TIOCSTI injected into the terminal on fd %d", fd))
		}
	}
	report("blocked", strings.Join(errs, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe tiocsti tries to push characters into the input queue of the
// terminal on its stdin/stdout/stderr and /dev/tty with TIOCSTI; when that
// terminal belongs to the host (the test passes a host pty slave as
// stdin), a success types commands into the user's shell after the
// sandbox exits.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "tiocsti"

func main() { probe.Run(name, attack, control) }

func attack() {
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

// control: outside a sandbox the attack, started in a session of its own
// whose controlling terminal is a pseudo-terminal this control opened
// (never the user's), pushes its input into that terminal.
func control() {
	master, slave, err := openPTY()
	if err != nil {
		report(probe.Error, "no pty: "+err.Error())
	}
	defer master.Close()
	defer slave.Close()
	a := probe.AttackOnHost(func(c *exec.Cmd) {
		c.Stdin = slave
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
	})
	queued, _ := unix.IoctlGetInt(int(slave.Fd()), unix.TIOCINQ)
	switch {
	case a.Result == "allowed" && queued > 0:
		report(probe.Reachable, fmt.Sprintf("outside a sandbox %d bytes went into the input queue of its own terminal: %s", queued, a.Detail))
	case !probe.Privileged() && probe.Sysctl("dev/tty/legacy_tiocsti") == "0":
		report(probe.NotApplicable, "dev.tty.legacy_tiocsti=0: the kernel refuses TIOCSTI to unprivileged processes, sandbox or not: "+a.Detail)
	}
	report(probe.Unreachable, fmt.Sprintf("%s (%d bytes queued): %s", a.Result, queued, a.Detail))
}

func openPTY() (master, slave *os.File, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		return nil, nil, err
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return m, s, nil
}

func report(result, detail string) { probe.Report(name, result, detail) }

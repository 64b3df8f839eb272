package native

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// lockdown leaves a re-executed init that stays on as the sandbox's PID 1
// (reaping, forwarding signals, reporting the command's status) with no
// privilege, before the command's first instruction runs: on every
// thread of the Go runtime, the bounding set emptied, securebits that
// keep uid 0 from regaining capabilities by execve or setuid (locked),
// the ambient, inheritable, permitted and effective sets cleared and
// no_new_privs set; then a seccomp filter synchronised to all threads.
// The filter is the command's own (PID 1 is then allowed no system call
// the command is not, and the command's profiles all run Go programs),
// or docker's profile without ptrace for an unconfined command.
//
// As host uid 0 without capabilities PID 1 still counts, by the kernel's
// rule, as the owner of the command's user namespace: that is what lets
// it forward signals to the command. Its filter leaves it no way to use
// that ownership for anything else (no setns, unshare, mount or ptrace).
func (s *initState) lockdown() error {
	if s.locked {
		return nil
	}
	s.locked = true
	all := func(what string, trap, a1, a2, a3, a4, a5, a6 uintptr) error {
		if _, _, e := syscall.AllThreadsSyscall6(trap, a1, a2, a3, a4, a5, a6); e != 0 {
			if e == syscall.ENOTSUP {
				// The Go runtime offers no per-thread system call on all
				// threads in a cgo build: refuse rather than leave some
				// threads privileged.
				return fmt.Errorf("PID 1 lockdown: %s: this agentkernel is a cgo build; build it with CGO_ENABLED=0", what)
			}
			return fmt.Errorf("PID 1 lockdown: %s: %w", what, e)
		}
		return nil
	}
	last := lastCap()
	for c := 0; c <= last; c++ {
		if err := all("dropping a capability from the bounding set", unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0, 0); err != nil {
			return err
		}
	}
	if err := all("securebits", unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, pid1Securebits, 0, 0, 0, 0); err != nil {
		return err
	}
	if err := all("ambient capabilities", unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); err != nil {
		return err
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	err := all("capset", unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0, 0, 0, 0)
	runtime.KeepAlive(&hdr)
	runtime.KeepAlive(&data)
	if err != nil {
		return err
	}
	if err := all("no_new_privs", unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); err != nil {
		return err
	}
	prog := s.cfg.Exec.Filter
	if len(prog) == 0 {
		p, err := compileSeccomp("default-no-ptrace", nil, false)
		if err != nil {
			if auditArch == 0 {
				return nil // no filters on this architecture at all
			}
			return fmt.Errorf("PID 1 lockdown: %w", err)
		}
		prog = unsafe.Slice((*byte)(unsafe.Pointer(&p[0])), len(p)*8)
	}
	if len(prog)%8 != 0 {
		return fmt.Errorf("PID 1 lockdown: seccomp program of %d bytes", len(prog))
	}
	fprog := unix.SockFprog{Len: uint16(len(prog) / 8), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0]))}
	r, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	switch {
	case e != 0:
		return fmt.Errorf("PID 1 lockdown: loading seccomp filter: %w", e)
	case r != 0:
		return fmt.Errorf("PID 1 lockdown: thread %d could not take the seccomp filter", r)
	}
	return nil
}

package native

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// A persistent sandbox's supervisor only has to outlive the init (which
// serves the sandbox's clients itself) and clean up after it. A Go
// process doing nothing but wait still keeps a few MiB resident, so the
// supervisor becomes the stub (stub_linux.go) instead: ExecWaiter
// replaces the supervisor's program with a two-record script, waitid on
// the init without reaping it, then execveat of agentkernel (through a
// descriptor of the running binary, so an upgrade on disk cannot swap
// it) with the reaper's arguments. The process, its pid, its start time
// and its children stay the same across both execs: the init remains
// its child (and dies with it, Pdeathsig), and the reaper collects the
// init's status with wait4.
//
// The init's Pdeathsig follows the thread that forked it: the caller
// must have started the sandbox and must call ExecWaiter on one locked
// OS thread (runtime.LockOSThread), so that no other thread's exit at
// exec kills the init.

// argv0Wait names the waiting stub in ps.
const argv0Wait = "agentkernel:supervise"

// ReserveWaiterFds makes sure descriptors 3 and 4, which the stub reads
// its script from and reports errors to, belong to the caller (keep,
// when not nil, already is one of them): free numbers get /dev/null. It
// must run before anything else in the process can take those numbers,
// and it reports false when one is held by something else.
func ReserveWaiterFds(keep *os.File) bool {
	for fd := 3; fd <= 4; fd++ {
		if keep != nil && int(keep.Fd()) == fd {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			return false
		}
		nfd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return false
		}
		if nfd != fd {
			err = unix.Dup3(nfd, fd, unix.O_CLOEXEC)
			unix.Close(nfd)
			if err != nil {
				return false
			}
		}
	}
	return true
}

// ExecWaiter replaces the calling process with the waiting stub (see
// above): it returns only on failure, and with sandbox.ErrUnsupported
// where no stub exists for the architecture. Descriptors 3 and 4 must
// be the caller's (ReserveWaiterFds); they are replaced.
func ExecWaiter(initPid int, argv, env []string) error {
	if execStub == "" {
		return fmt.Errorf("a waiting supervisor is %w on this architecture", sandbox.ErrUnsupported)
	}
	// Not close-on-exec: the stub execs agentkernel through it.
	exe, err := unix.Open("/proc/self/exe", unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	s := &stubScript{dataOff: stubHeader + 4*stubRecSize}
	info := s.bytes(make([]byte, 128)) // siginfo_t
	s.add("waiting for the sandbox init", unix.SYS_WAITID, unix.P_PID, initPid, info, unix.WEXITED|unix.WNOWAIT, 0)
	s.add("starting the reaper", unix.SYS_EXECVEAT, exe, s.cstr(""), s.strv(argv), s.strv(env), unix.AT_EMPTY_PATH)
	b, err := s.encode()
	if err != nil {
		unix.Close(exe)
		return err
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		unix.Close(exe)
		return err
	}
	// The script fits the pipe's buffer: nobody reads it before the exec.
	_, err = unix.Write(p[1], b)
	unix.Close(p[1])
	mem, merr := unix.MemfdCreate(argv0Wait, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err == nil {
		err = merr
	}
	if err == nil {
		_, err = unix.Write(mem, []byte(execStub))
	}
	if err != nil {
		unix.Close(p[0])
		unix.Close(exe)
		return err
	}
	_, _ = unix.FcntlInt(uintptr(mem), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE)
	devnull, err := unix.Open(os.DevNull, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		err = unix.Dup3(devnull, 4, 0)
		unix.Close(devnull)
	}
	if err == nil {
		err = unix.Dup3(p[0], 3, 0)
	}
	unix.Close(p[0])
	if err == nil {
		err = syscall.Exec("/proc/self/fd/"+strconv.Itoa(mem), []string{argv0Wait}, []string{})
	}
	unix.Close(mem)
	unix.Close(exe)
	return fmt.Errorf("becoming the waiting supervisor: %w", err)
}

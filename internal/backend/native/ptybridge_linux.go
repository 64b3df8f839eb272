package native

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/agentkernel/agentkernel/internal/agent"
)

// sandboxPTY is a pseudo-terminal allocated from a sandbox's own devpts
// instance, so that the command's terminal is a /dev/pts/N that exists
// inside (ttyname works), bridged to the caller's terminal (in, out).
type sandboxPTY struct {
	master *os.File
	slave  int
	in     *os.File // duplicates of the caller's stdin and stdout
	out    *os.File
	saved  *term.State
	// terminal: the caller's stdin is a terminal (else its end is
	// passed on as the pty's, agent.CopyToPTY).
	terminal bool
	done     chan struct{}
	once     sync.Once
}

// openSandboxPTY opens the sandbox's /dev/pts/ptmx through its root
// descriptor (the sandbox's own path resolution: RESOLVE_IN_ROOT, no
// magic links), checks that it is a devpts multiplexer, and makes a pty
// whose slave belongs to uid:gid (-1: left as the kernel made it).
// in and out are the caller's stdin and stdout (usually one terminal).
func openSandboxPTY(rootFd, in, out, uid, gid int) (*sandboxPTY, error) {
	fd, err := openInRoot(rootFd, "/dev/pts/ptmx", unix.O_RDWR|unix.O_NOCTTY)
	if err != nil {
		return nil, fmt.Errorf("the sandbox's /dev/pts/ptmx: %w", err)
	}
	master := os.NewFile(uintptr(fd), "ptmx")
	fail := func(err error) (*sandboxPTY, error) {
		master.Close()
		return nil, err
	}
	slave, err := devptsPeer(fd)
	if err != nil {
		return fail(err)
	}
	if uid >= 0 {
		_ = unix.Fchown(slave, uid, gid)
	}
	dupIn, err := unix.FcntlInt(uintptr(in), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Close(slave)
		return fail(err)
	}
	dupOut, err := unix.FcntlInt(uintptr(out), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Close(dupIn)
		unix.Close(slave)
		return fail(err)
	}
	p := &sandboxPTY{master: master, slave: slave, done: make(chan struct{})}
	if term.IsTerminal(dupIn) {
		p.terminal = true
		if ws, err := unix.IoctlGetWinsize(dupIn, unix.TIOCGWINSZ); err == nil {
			_ = unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, ws)
		}
		// The caller's terminal passes bytes through: the sandbox's pty
		// is the one line discipline.
		if st, err := term.MakeRaw(dupIn); err == nil {
			p.saved = st
		}
	}
	// Non-blocking, so that close ends a pending read (the poller).
	_ = unix.SetNonblock(dupIn, true)
	p.in = os.NewFile(uintptr(dupIn), "caller-stdin")
	p.out = os.NewFile(uintptr(dupOut), "caller-stdout")
	return p, nil
}

// devptsPeer checks that fd is a devpts multiplexer (/dev/pts/ptmx of a
// devpts instance, not a file, FIFO or other device put in its place),
// unlocks its pty and opens the slave without a path look-up.
func devptsPeer(fd int) (int, error) {
	if err := devptsMux(fd); err != nil {
		return -1, err
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		return -1, fmt.Errorf("unlocking the pty: %w", err)
	}
	// TIOCGPTPEER opens the slave with the flags its argument gives,
	// without a path look-up.
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(unix.TIOCGPTPEER), uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if e != 0 {
		return -1, fmt.Errorf("opening the pty's slave: %w", e)
	}
	return int(r), nil
}

// devptsMux checks that fd is a devpts multiplexer: an open /dev/pts/ptmx
// of a devpts instance (which is also what its pty's master is), not a
// file, FIFO or other device put in its place.
func devptsMux(fd int) error {
	var fs unix.Statfs_t
	var st unix.Stat_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if fs.Type != unix.DEVPTS_SUPER_MAGIC || st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 5 || unix.Minor(st.Rdev) != 2 {
		return errors.New("the sandbox's /dev/pts/ptmx is not its devpts multiplexer")
	}
	return nil
}

// bridge copies between the caller's terminal and the pty until the
// command's side is gone (every holder of the slave closed it), then
// gives the caller's terminal back its mode. The window size follows the
// caller's terminal while it runs.
func (p *sandboxPTY) bridge() {
	go agent.CopyToPTY(p.master, p.in, p.terminal)
	go p.followSize()
	go func() {
		_, _ = io.Copy(p.out, p.master)
		p.close()
	}()
}

// followSize copies the caller's window size to the pty when it changes
// (the caller's terminal sends no signal here).
func (p *sandboxPTY) followSize() {
	if p.saved == nil {
		return
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last unix.Winsize
	for {
		select {
		case <-p.done:
			return
		case <-tick.C:
		}
		rc, err := p.in.SyscallConn()
		if err != nil {
			return
		}
		var ws *unix.Winsize
		_ = rc.Control(func(fd uintptr) { ws, err = unix.IoctlGetWinsize(int(fd), unix.TIOCGWINSZ) })
		if err != nil || ws == nil || *ws == last {
			continue
		}
		last = *ws
		_ = unix.IoctlSetWinsize(int(p.master.Fd()), unix.TIOCSWINSZ, ws)
	}
}

// closeSlave closes this process's copy of the slave, once the command
// holds its own: the master then reads EOF when the command's are gone.
func (p *sandboxPTY) closeSlave() {
	if p.slave >= 0 {
		unix.Close(p.slave)
		p.slave = -1
	}
}

// close restores the caller's terminal and closes the pty's ends.
func (p *sandboxPTY) close() {
	p.once.Do(func() {
		close(p.done)
		if p.saved != nil {
			rc, err := p.in.SyscallConn()
			if err == nil {
				_ = rc.Control(func(fd uintptr) { _ = term.Restore(int(fd), p.saved) })
			}
		}
		p.in.Close()
		p.out.Close()
		p.master.Close()
	})
}

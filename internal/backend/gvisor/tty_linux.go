package gvisor

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// ttyDrain is how long a run waits, after the command ended, for the
// rest of its terminal's output.
const ttyDrain = 2 * time.Second

// console is a run's terminal (-t): runsc opens the pseudo-terminal,
// hands its master to the run over the console socket, and the run
// bridges the master to its own stdin and stdout (the caller's terminal
// in raw mode meanwhile).
type console struct {
	path    string
	ln      *net.UnixListener
	stdio   sandbox.Stdio
	master  chan *os.File
	outDone chan struct{}
	mu      sync.Mutex
	restore func()
}

func newConsole(dir string, stdio sandbox.Stdio) (*console, error) {
	path := dir + "/console.sock"
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("the terminal's socket: %w", err)
	}
	c := &console{path: path, ln: ln, stdio: stdio, master: make(chan *os.File, 1), outDone: make(chan struct{}), restore: func() {}}
	go c.serve()
	return c, nil
}

// size is the caller's terminal's size, if stdin is one.
func (c *console) size() (rows, cols uint16, ok bool) {
	f, isFile := c.stdio.Stdin.(*os.File)
	if !isFile {
		return 0, 0, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0, false
	}
	return ws.Row, ws.Col, true
}

// serve takes the master from runsc and bridges it.
func (c *console) serve() {
	defer close(c.outDone)
	m, err := c.accept()
	if err != nil {
		return
	}
	c.master <- m
	if f, ok := c.stdio.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if st, err := term.MakeRaw(int(f.Fd())); err == nil {
			c.mu.Lock()
			c.restore = func() { _ = term.Restore(int(f.Fd()), st) }
			c.mu.Unlock()
		}
	}
	c.resize(m)
	if c.stdio.Stdin != nil {
		go func() { _, _ = io.Copy(m, c.stdio.Stdin) }()
	}
	if c.stdio.Stdout != nil {
		_, _ = io.Copy(c.stdio.Stdout, m) // ends with EIO once the command's side closes
	}
}

func (c *console) accept() (*os.File, error) {
	conn, err := c.ln.AcceptUnix()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	buf, oob := make([]byte, 512), make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) == 0 {
		return nil, errors.New("runsc sent no terminal")
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, errors.New("runsc sent no terminal")
	}
	return os.NewFile(uintptr(fds[0]), "pty master"), nil
}

// resize gives the sandbox's terminal the caller's size.
func (c *console) resize(m *os.File) {
	if rows, cols, ok := c.size(); ok {
		_ = unix.IoctlSetWinsize(int(m.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}
}

// onResize follows the caller's terminal's size (SIGWINCH).
func (c *console) onResize() {
	select {
	case m := <-c.master:
		c.resize(m)
		c.master <- m
	default:
	}
}

// close ends the bridge once the command has ended: what it wrote last
// is copied first (for ttyDrain at most), and the caller's terminal is
// restored.
func (c *console) close() {
	c.ln.Close()
	select {
	case <-c.outDone:
	case <-time.After(ttyDrain):
	}
	select {
	case m := <-c.master:
		m.Close()
	default:
	}
	c.mu.Lock()
	c.restore()
	c.mu.Unlock()
}

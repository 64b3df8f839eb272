package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Handler is what the run socket serves.
type Handler struct {
	// Run runs spec to completion with stdio, forwarding sigs; served
	// is how ("hit", "prepared").
	Run func(ctx context.Context, spec *sandbox.Spec, stdio sandbox.Stdio, sigs <-chan os.Signal) (res sandbox.Result, served string, err error)
	// Prewarm keeps count sandboxes of spec ready.
	Prewarm func(spec *sandbox.Spec, count int) error
	Logger  *slog.Logger
	// Build is the daemon's BuildID, taken when it started.
	Build string
}

// Listen creates the run socket at path (mode 0600; a stale socket file
// is replaced).
func Listen(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepathDir(path), 0o700); err != nil {
		return nil, err
	}
	_ = os.Remove(path)
	old := unix.Umask(0o177)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(true)
	return ln, nil
}

func filepathDir(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return "."
}

// Serve answers connections on ln until ctx is done, then closes ln and
// waits for the runs in flight (ctx does not end them: a run ends with
// its command or its client).
func Serve(ctx context.Context, ln *net.UnixListener, h Handler) {
	if h.Logger == nil {
		h.Logger = slog.New(slog.DiscardHandler)
	}
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				h.Logger.Warn("run socket: accept", "error", err)
				continue
			}
			break
		}
		wg.Go(func() { h.serveConn(c) })
	}
	wg.Wait()
}

// peerUID is the uid of the process at the other end of c.
func peerUID(c *net.UnixConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	uid := -1
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		var cred *unix.Ucred
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if cerr == nil {
			uid = int(cred.Uid)
		}
	}); err != nil {
		return -1, err
	}
	return uid, cerr
}

func (h Handler) serveConn(c *net.UnixConn) {
	defer c.Close()
	reply := func(r Reply) {
		if b, err := encode(r); err == nil {
			_, _ = c.Write(b)
		}
	}
	if uid, err := peerUID(c); err != nil || uid != os.Geteuid() {
		reply(Reply{Error: "permission denied: the daemon serves its own user only"})
		return
	}
	buf := make([]byte, maxRequest+1)
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return
	}
	var files []*os.File
	if oobn > 0 {
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				fds, _ := unix.ParseUnixRights(&m)
				for _, fd := range fds {
					unix.CloseOnExec(fd)
					files = append(files, os.NewFile(uintptr(fd), "client"))
				}
			}
		}
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var req Request
	if n > maxRequest || json.Unmarshal(buf[:n], &req) != nil || req.Spec == nil {
		reply(Reply{Error: "bad request"})
		return
	}
	if req.Build != h.Build {
		reply(Reply{Error: ErrStale.Error(), Kind: "stale"})
		return
	}
	switch req.Op {
	case "prewarm":
		if h.Prewarm == nil {
			reply(Reply{Error: "prewarm is not served", Kind: "unsupported"})
			return
		}
		if err := h.Prewarm(req.Spec, req.Count); err != nil {
			reply(errorReply(err))
			return
		}
		reply(Reply{})
	case "run":
		if len(files) != 3 || h.Run == nil {
			reply(Reply{Error: "a run needs the client's stdin, stdout and stderr"})
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sigs := make(chan os.Signal, 8)
		// Later messages are signals; the client's end closing ends
		// the run (as its death would end a direct run).
		go func() {
			defer cancel()
			b := make([]byte, 256)
			for {
				n, err := c.Read(b)
				if err != nil || n == 0 {
					return
				}
				var m control
				if json.Unmarshal(b[:n], &m) == nil && m.Signal > 0 && m.Signal < 65 {
					select {
					case sigs <- syscall.Signal(m.Signal):
					default:
					}
				}
			}
		}()
		res, served, err := h.Run(ctx, req.Spec, sandbox.Stdio{Stdin: files[0], Stdout: files[1], Stderr: files[2]}, sigs)
		if err != nil {
			reply(errorReply(err))
			return
		}
		reply(Reply{ExitCode: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut, Served: served})
	default:
		reply(Reply{Error: fmt.Sprintf("unknown op %q", req.Op)})
	}
}

// dial connects to the run socket.
func dial(path string) (*net.UnixConn, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, ErrNoDaemon
	}
	return c, nil
}

// forwarded are the signals a client passes on to its command.
var forwarded = []os.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2}

// Run asks the daemon at path to run spec with the given stdin, stdout
// and stderr, forwarding this process's signals, and returns the result.
// ErrNoDaemon or ErrNotServed mean nothing ran and the caller should run
// spec itself.
func Run(path string, spec *sandbox.Spec, stdin, stdout, stderr *os.File) (sandbox.Result, error) {
	b, err := encode(Request{Op: "run", Spec: spec, Build: BuildID()})
	if err != nil || len(b) > maxRequest {
		return sandbox.Result{}, ErrNotServed
	}
	c, err := dial(path)
	if err != nil {
		return sandbox.Result{}, err
	}
	defer c.Close()
	sigCh := make(chan os.Signal, 8)
	signal.Notify(sigCh, forwarded...)
	defer signal.Stop(sigCh)
	rights := unix.UnixRights(int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd()))
	if _, _, err := c.WriteMsgUnix(b, rights, nil); err != nil {
		return sandbox.Result{}, ErrNoDaemon
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case s := <-sigCh:
				if m, err := encode(control{Signal: int(s.(syscall.Signal))}); err == nil {
					_, _ = c.Write(m)
				}
			case <-done:
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	n, err := c.Read(buf)
	if err != nil || n == 0 {
		return sandbox.Result{}, errors.New("the agentkernel daemon closed the connection before the command ended (see 'agentkernel daemon status')")
	}
	var r Reply
	if err := json.Unmarshal(buf[:n], &r); err != nil {
		return sandbox.Result{}, fmt.Errorf("bad reply from the daemon: %w", err)
	}
	if err := r.err(); err != nil {
		return sandbox.Result{}, err
	}
	return sandbox.Result{ExitCode: r.ExitCode, Signal: r.Signal, TimedOut: r.TimedOut}, nil
}

// Prewarm asks the daemon at path to keep count sandboxes of spec ready.
func Prewarm(path string, spec *sandbox.Spec, count int) error {
	b, err := encode(Request{Op: "prewarm", Spec: spec, Count: count, Build: BuildID()})
	if err != nil {
		return err
	}
	if len(b) > maxRequest {
		return errors.New("the sandbox spec is too large for the daemon")
	}
	c, err := dial(path)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		return ErrNoDaemon
	}
	buf := make([]byte, 64<<10)
	n, err := c.Read(buf)
	if err != nil || n == 0 {
		return errors.New("the agentkernel daemon closed the connection")
	}
	var r Reply
	if err := json.Unmarshal(buf[:n], &r); err != nil {
		return fmt.Errorf("bad reply from the daemon: %w", err)
	}
	return r.err()
}

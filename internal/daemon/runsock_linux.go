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
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/peercred"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Handler is what the run socket serves.
type Handler struct {
	// Run runs spec to completion with stdio, forwarding sigs; served
	// is how ("hit", "prepared"). It calls warn, before the command
	// starts, with what a direct run would have warned about.
	Run func(ctx context.Context, spec *sandbox.Spec, stdio sandbox.Stdio, sigs <-chan os.Signal, warn func(string)) (res sandbox.Result, served string, err error)
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
	self := peercred.ReadSelf()
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
		wg.Go(func() { h.serveConn(c, self) })
	}
	wg.Wait()
}

func (h Handler) serveConn(c *net.UnixConn, self peercred.Self) {
	defer c.Close()
	reply := func(r Reply) {
		if b, err := encode(r); err == nil {
			_, _ = c.Write(b)
		}
	}
	// Same uid is not enough: a rootless sandbox's user namespace maps
	// its ids to the caller's, so a sandboxed process that reaches this
	// socket (a volume of the data directory) has our uid too.
	peer, err := self.Of(c)
	switch {
	case err != nil || peer.UID != os.Geteuid():
		discardRequest(c)
		reply(Reply{Error: "permission denied: the daemon serves its own user only"})
		return
	case !peer.OwnNS:
		h.Logger.Warn("run socket: refused a client of our uid in another user or PID namespace", "pid", peer.PID, "reason", peer.NSErr)
		discardRequest(c)
		reply(Reply{Error: "permission denied: the daemon serves only processes in its own user and PID namespaces, not from inside a sandbox or a container"})
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
		// Warnings go to the client's stderr as its own would, ahead
		// of the command's output.
		warn := func(msg string) {
			if !req.Quiet {
				fmt.Fprintf(files[2], "agentkernel: warning: %s\n", msg)
			}
		}
		res, served, err := h.Run(ctx, req.Spec, sandbox.Stdio{Stdin: files[0], Stdout: files[1], Stderr: files[2]}, sigs, warn)
		if err != nil {
			reply(errorReply(err))
			return
		}
		reply(Reply{ExitCode: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut, OOMKills: res.OOMKills, Served: served, NetworkSummary: res.NetworkSummary})
	default:
		reply(Reply{Error: fmt.Sprintf("unknown op %q", req.Op)})
	}
}

// discardRequest reads a refused client's request (closing any
// descriptors it passed), so that the refusal reaches it as the reply
// rather than as a connection reset while it still sends; a client that
// sends nothing is waited for a few seconds.
func discardRequest(c *net.UnixConn) {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	oob := make([]byte, unix.CmsgSpace(3*4))
	_, oobn, _, _, err := c.ReadMsgUnix(make([]byte, 1), oob)
	if err != nil || oobn == 0 {
		return
	}
	msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
	for _, m := range msgs {
		fds, _ := unix.ParseUnixRights(&m)
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
}

// client is a CLI's end of the run socket: plain blocking system calls
// rather than package net, whose poller (epoll instance, eventfd, poller
// thread) a short-lived CLI would set up for one request.
type client struct{ fd int }

// dial connects to the run socket.
func dial(path string) (*client, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, ErrNoDaemon
	}
	for {
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: path})
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, ErrNoDaemon
	}
	return &client{fd: fd}, nil
}

// send sends one message with oob (SCM_RIGHTS) attached.
func (c *client) send(b, oob []byte) error {
	for {
		err := unix.Sendmsg(c.fd, b, oob, nil, 0)
		if err != unix.EINTR {
			return err
		}
	}
}

// Write sends one message.
func (c *client) Write(b []byte) (int, error) {
	if err := c.send(b, nil); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Read receives one message; 0 bytes means the daemon closed the
// connection.
func (c *client) Read(b []byte) (int, error) {
	for {
		n, err := unix.Read(c.fd, b)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// Close closes the connection.
func (c *client) Close() error { return unix.Close(c.fd) }

// forwarded are the signals a client passes on to its command.
var forwarded = []os.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2}

// Client is one run through the daemon, set up in the background while
// the caller still resolves its spec: signal forwarding (the first
// signal.Notify of a process starts a thread) and the JSON codecs of the
// request and reply (built by reflection on first use) are ready when
// the spec is, which takes that work off a CLI run's critical path
// (docs/perf-log.md, the daemon entries).
//
// From NewClient on, the forwarded signals are caught: Close, when Run
// was not called, stops that and raises again any that arrived, so they
// reach whatever the caller does instead.
type Client struct {
	// Quiet: the daemon writes no warnings to the client's stderr.
	Quiet bool
	// Build identifies the agentkernel-full binary this client was
	// built with (BuildIDOf); empty means this binary (BuildID).
	Build string

	path  string
	sigCh chan os.Signal
	ready chan struct{}

	mu     sync.Mutex
	used   bool
	closed bool
}

func (cl *Client) build() string {
	if cl.Build != "" {
		return cl.Build
	}
	return BuildID()
}

// NewClient starts a run through the daemon listening at path.
func NewClient(path string) *Client {
	c := &Client{path: path, sigCh: make(chan os.Signal, 8), ready: make(chan struct{})}
	go func() {
		defer close(c.ready)
		signal.Notify(c.sigCh, forwarded...)
		_, _ = encode(Request{Op: "run", Spec: &sandbox.Spec{}})
		_ = json.Unmarshal([]byte(`{}`), new(Reply))
	}()
	return c
}

// Close releases the client's signals (see Client). It is safe to call
// more than once, and after Run.
func (c *Client) Close() {
	<-c.ready
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	signal.Stop(c.sigCh)
	if c.used {
		return
	}
	for {
		select {
		case s := <-c.sigCh:
			if sig, ok := s.(syscall.Signal); ok {
				_ = syscall.Kill(os.Getpid(), sig)
			}
		default:
			return
		}
	}
}

// Run asks the daemon to run spec with the given stdin, stdout and
// stderr, forwarding this process's signals, and returns the result.
// ErrNoDaemon or ErrNotServed mean nothing ran and the caller should run
// spec itself. A Client runs one spec.
func (cl *Client) Run(spec *sandbox.Spec, stdin, stdout, stderr *os.File) (sandbox.Result, error) {
	<-cl.ready
	cl.mu.Lock()
	if cl.used || cl.closed {
		cl.mu.Unlock()
		return sandbox.Result{}, errors.New("daemon client: one run per client")
	}
	cl.mu.Unlock()
	b, err := encode(Request{Op: "run", Spec: spec, Build: cl.build(), Quiet: cl.Quiet})
	if err != nil || len(b) > maxRequest {
		return sandbox.Result{}, ErrNotServed
	}
	c, err := dial(cl.path)
	if err != nil {
		return sandbox.Result{}, err
	}
	defer c.Close()
	rights := unix.UnixRights(int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd()))
	if err := c.send(b, rights); err != nil {
		return sandbox.Result{}, ErrNoDaemon
	}
	// From here the daemon may run the command: signals are its.
	cl.mu.Lock()
	cl.used = true
	cl.mu.Unlock()
	// The forwarder ends before the descriptor is closed (defers run
	// last-in first-out), so it never writes to a reused number.
	done := make(chan struct{})
	var fwd sync.WaitGroup
	defer fwd.Wait()
	defer close(done)
	fwd.Add(1)
	go func() {
		defer fwd.Done()
		for {
			select {
			case s := <-cl.sigCh:
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
	return sandbox.Result{ExitCode: r.ExitCode, Signal: r.Signal, TimedOut: r.TimedOut, OOMKills: r.OOMKills, NetworkSummary: r.NetworkSummary}, nil
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

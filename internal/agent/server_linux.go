package agent

import (
	"errors"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/idletrim"
)

// Sandbox is a running sandbox as a Server sees it: a backend's handle on
// it, from outside or from inside the sandbox as the backend arranges.
type Sandbox interface {
	// Exec starts a command with stdio (which the caller keeps and
	// closes) as its descriptors 0-2 and returns once it runs. An error
	// that says why the command could not be executed is an *ExecError.
	Exec(req *ExecRequest, stdio [3]int) (Process, error)
	// FS does file operations confined to the sandbox's root.
	FS() *FS
	// Stats reports the sandbox's processes, uptime and resident memory.
	Stats() Stats
	// Stop ends every process of the sandbox (SIGTERM, SIGKILL after a
	// grace period) and returns once the sandbox is gone.
	Stop()
}

// RemoteFiles is a Sandbox whose files are not below a root this
// process can open (a sandbox on another machine, a job of an
// orchestrator): the server does every file operation through it and
// never calls FS. Errors follow FS's: ErrRefused for a path never
// allowed, a syscall.Errno (ENOENT for a missing file) where one
// applies.
type RemoteFiles interface {
	// ReadFile copies the regular file at p to w.
	ReadFile(p string, w io.Writer) (int64, error)
	// WriteFile creates or replaces the regular file at p (its parents
	// created) with r's bytes.
	WriteFile(p string, mode uint32, r io.Reader) (int64, error)
	Delete(p string, recursive bool) error
	Stat(p string) (Entry, error)
	List(p string) ([]Entry, error)
	// TarOut writes a tar stream of p; TarIn extracts one into the
	// directory dir (created when missing).
	TarOut(p string, w io.Writer) error
	TarIn(dir string, r io.Reader) error
}

// files is the sandbox's file operations: its RemoteFiles, else its FS.
func (s *Server) files() RemoteFiles {
	if rf, ok := s.sb.(RemoteFiles); ok {
		return rf
	}
	return localFiles{s.sb.FS()}
}

// localFiles are FS's operations as RemoteFiles.
type localFiles struct{ fs *FS }

func (l localFiles) ReadFile(p string, w io.Writer) (int64, error) {
	f, err := l.fs.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.Copy(w, f)
}

func (l localFiles) WriteFile(p string, mode uint32, r io.Reader) (int64, error) {
	f, err := l.fs.Create(p, mode)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

func (l localFiles) Delete(p string, recursive bool) error { return l.fs.Delete(p, recursive) }
func (l localFiles) Stat(p string) (Entry, error)          { return l.fs.Stat(p) }
func (l localFiles) List(p string) ([]Entry, error)        { return l.fs.List(p) }
func (l localFiles) TarOut(p string, w io.Writer) error    { return l.fs.TarOut(p, w) }
func (l localFiles) TarIn(dir string, r io.Reader) error {
	if err := l.fs.MkdirAll(dir); err != nil {
		return err
	}
	return l.fs.TarIn(dir, r)
}

// OOMCounter is a Sandbox that can tell when its memory limit killed
// processes; the server then says so in a command's Exited answer.
type OOMCounter interface {
	// OOMKills is how many of the sandbox's processes the memory
	// limit's OOM killer has ended since the sandbox started, and the
	// limit in MiB; 0, 0 without a memory limit.
	OOMKills() (kills int, memoryMB int64)
}

// Process is a command started by Sandbox.Exec.
type Process interface {
	// Pid is the command's pid in the sandbox's PID namespace.
	Pid() int
	// Signal sends sig to the command.
	Signal(sig syscall.Signal) error
	// SignalGroup sends sig to the command's process group (it leads a
	// session of its own), while the command has not been reaped.
	SignalGroup(sig syscall.Signal) error
	// Wait blocks until the command ends and returns its wait status.
	Wait() syscall.WaitStatus
}

// DetachedExecer is a Sandbox that starts detached commands its own way
// (gvisor: as containers of the sandbox, which a memory snapshot keeps,
// rather than as execs, which it does not): the server calls
// ExecDetached, with the detached command's id, instead of Exec.
type DetachedExecer interface {
	ExecDetached(id string, req *ExecRequest, stdio [3]int) (Process, error)
}

// Restored is a detached command that a sandbox's boot brought back
// with its memory (a memory snapshot's): its process, and the read ends
// of its stdout and stderr, which the server copies on into the
// command's files.
type Restored struct {
	Proc           Process
	Stdout, Stderr *os.File
}

// DetachedRestorer is a Sandbox whose boot may have restored detached
// commands: RestoredDetached returns them by id (ServeDetached lists
// those as running, where their records say they were).
type DetachedRestorer interface {
	RestoredDetached() map[string]Restored
}

// idleTrimAfter is how long a server waits without a request before it
// gives memory back (package idletrim).
const idleTrimAfter = 10 * time.Second

// Server answers the agent protocol for one sandbox on every connection
// accepted on a listening socket: exec (with the client's descriptors as
// the command's stdio, Started then Exited), signals to the commands a
// connection started, file operations through Sandbox.FS, stats and stop.
// A connection that closes takes the commands it started with it: the
// server kills them (their client is gone, nobody reads their output or
// their status) and reports each through Audit. Detached commands
// (ServeDetached) are the server's own and run on.
type Server struct {
	sb   Sandbox
	trim *idletrim.Trimmer
	det  *detachedSet

	// Audit, when set, receives how each command ended that no client
	// saw end (ExecEnd). Set it before Serve.
	Audit func(ExecEnd)

	stopOnce sync.Once
	stopped  chan struct{}
}

// NewServer returns a Server for sb.
func NewServer(sb Sandbox) *Server {
	return &Server{sb: sb, trim: idletrim.New(idleTrimAfter), stopped: make(chan struct{})}
}

// Stopped is closed once a client's OpStop has stopped the sandbox.
func (s *Server) Stopped() <-chan struct{} { return s.stopped }

// Close stops the idle trimmer (the listener is the caller's).
func (s *Server) Close() { s.trim.Stop() }

// Serve accepts clients on the listening SOCK_SEQPACKET socket lfd until
// it is closed or shut down.
func (s *Server) Serve(lfd int) {
	for {
		nfd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
		if err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ECONNABORTED) {
				continue
			}
			return
		}
		c := &serverConn{s: s, conn: NewConn(os.NewFile(uintptr(nfd), "client")), procs: map[uint64]*foreground{}}
		go c.serve()
	}
}

// serverConn is one client connection; request IDs are its own.
type serverConn struct {
	s    *Server
	conn *Conn

	mu    sync.Mutex
	procs map[uint64]*foreground // running commands by their exec request's ID
	gone  bool                   // the client went away
}

// foreground is a command a connection's exec started.
type foreground struct {
	p     Process
	args  []string
	start time.Time
}

func (s *Server) audit(e ExecEnd) {
	if s.Audit != nil {
		s.Audit(e)
	}
}

func (c *serverConn) serve() {
	defer c.conn.Close()
	for {
		var req Request
		fds, err := c.conn.Recv(&req)
		if err != nil {
			c.clientGone()
			return
		}
		switch req.Op {
		case OpStop:
			CloseFds(fds)
			go c.stop(req.ID)
		case OpStats:
			CloseFds(fds)
			st := c.s.sb.Stats()
			_ = c.conn.Send(Response{ID: req.ID, Stats: &st})
		default:
			idle := c.s.trim.Busy()
			go func() {
				defer idle()
				c.handle(req, fds)
			}()
		}
	}
}

// clientGone kills the commands the connection started and still runs:
// their client is gone. Each one's end is audited by its waiter.
func (c *serverConn) clientGone() {
	c.mu.Lock()
	c.gone = true
	procs := make([]*foreground, 0, len(c.procs))
	for _, f := range c.procs {
		procs = append(procs, f)
	}
	c.mu.Unlock()
	for _, f := range procs {
		killProc(f.p)
	}
}

// stop stops the sandbox (once, whoever asks) and answers when it is gone.
func (c *serverConn) stop(id uint64) {
	c.s.stopOnce.Do(func() {
		c.s.sb.Stop()
		close(c.s.stopped)
	})
	<-c.s.stopped
	_ = c.conn.Send(Response{ID: id, Exited: true})
}

func (c *serverConn) fail(id uint64, err error) {
	resp := Response{ID: id, Error: err.Error(), Kind: KindPath}
	var en syscall.Errno
	if errors.As(err, &en) {
		resp.Errno = int(en)
	}
	if errors.Is(err, ErrRefused) {
		resp.Kind = KindRefused
	}
	_ = c.conn.Send(resp)
}

func (c *serverConn) handle(req Request, fds []int) {
	switch req.Op {
	case OpExec:
		c.exec(req, fds)
		return
	case OpDetach:
		CloseFds(fds)
		c.detach(req)
		return
	case OpDetached:
		CloseFds(fds)
		c.detached(req)
		return
	case OpDetachedKill:
		CloseFds(fds)
		c.detachedKill(req)
		return
	}
	var file *os.File
	if len(fds) > 0 {
		// The first descriptor is the stream; file owns it from here, so
		// it must not be closed a second time below: a double close in
		// this multi-request process would close whatever descriptor
		// another request got under the same number meanwhile.
		file = os.NewFile(uintptr(fds[0]), "stream")
		fds = fds[1:]
		defer file.Close()
	}
	defer CloseFds(fds)
	needFile := func() bool {
		if file == nil {
			_ = c.conn.Send(Response{ID: req.ID, Error: "no descriptor attached", Kind: KindSetup})
			return false
		}
		return true
	}
	fs := c.s.files()
	switch req.Op {
	case OpPing:
		_ = c.conn.Send(Response{ID: req.ID})
	case OpSignal:
		c.mu.Lock()
		f := c.procs[req.Target]
		c.mu.Unlock()
		if f != nil && req.Signal > 0 {
			if req.Signal == int(syscall.SIGKILL) {
				killProc(f.p)
			} else {
				_ = f.p.Signal(syscall.Signal(req.Signal))
			}
		}
		_ = c.conn.Send(Response{ID: req.ID})
	case OpRead:
		if !needFile() {
			return
		}
		n, err := fs.ReadFile(req.Path, file)
		file.Close()
		if err != nil {
			c.fail(req.ID, err)
			return
		}
		_ = c.conn.Send(Response{ID: req.ID, Size: n})
	case OpWrite:
		if !needFile() {
			return
		}
		n, err := fs.WriteFile(req.Path, req.Mode, file)
		if err != nil {
			c.fail(req.ID, err)
			return
		}
		_ = c.conn.Send(Response{ID: req.ID, Size: n})
	case OpDelete:
		if err := fs.Delete(req.Path, req.Recursive); err != nil {
			c.fail(req.ID, err)
			return
		}
		_ = c.conn.Send(Response{ID: req.ID})
	case OpList:
		ents, err := fs.List(req.Path)
		if err != nil {
			c.fail(req.ID, err)
			return
		}
		_ = c.conn.Send(Response{ID: req.ID, Entries: ents})
	case OpStat:
		e, err := fs.Stat(req.Path)
		if err != nil {
			c.fail(req.ID, err)
			return
		}
		_ = c.conn.Send(Response{ID: req.ID, Stat: &e})
	case OpTarOut:
		if !needFile() {
			return
		}
		err := fs.TarOut(req.Path, file)
		file.Close()
		if err != nil {
			c.fail(req.ID, err)
			return
		}
		_ = c.conn.Send(Response{ID: req.ID})
	case OpDetachedLogs:
		if !needFile() {
			return
		}
		c.detachedLogs(req, file)
	case OpTarIn:
		if !needFile() {
			return
		}
		if err := fs.TarIn(req.Path, file); err != nil {
			c.fail(req.ID, err)
			return
		}
		_ = c.conn.Send(Response{ID: req.ID})
	default:
		_ = c.conn.Send(Response{ID: req.ID, Error: "unknown op " + strconv.Quote(req.Op), Kind: KindSetup})
	}
}

// exec starts the request's command with the three passed descriptors
// as its stdio, answers Started, and Exited when it ends.
func (c *serverConn) exec(req Request, fds []int) {
	if req.Exec == nil || len(req.Exec.Args) == 0 || len(fds) != 3 {
		CloseFds(fds)
		_ = c.conn.Send(Response{ID: req.ID, Error: "exec needs a command and three descriptors", Kind: KindSetup})
		return
	}
	oomsBefore := c.s.oomKills()
	p, err := c.s.sb.Exec(req.Exec, [3]int{fds[0], fds[1], fds[2]})
	CloseFds(fds) // the command has its own copies
	if err != nil {
		resp := Response{ID: req.ID, Error: err.Error(), Kind: KindSetup}
		var ee *ExecError
		if errors.As(err, &ee) {
			resp.Kind, resp.Errno = ee.Kind, int(ee.Errno)
		}
		_ = c.conn.Send(resp)
		return
	}
	f := &foreground{p: p, args: req.Exec.Args, start: time.Now()}
	c.mu.Lock()
	c.procs[req.ID] = f
	gone := c.gone
	c.mu.Unlock()
	if gone {
		// The client went while the command started.
		killProc(p)
	}
	_ = c.conn.Send(Response{ID: req.ID, Started: true, Pid: p.Pid()})
	// Waiting is not work: the server may trim its memory meanwhile.
	go func() {
		ws := p.Wait()
		c.mu.Lock()
		delete(c.procs, req.ID)
		gone := c.gone
		c.mu.Unlock()
		if gone {
			c.s.audit(ExecEnd{Args: f.args, ExitCode: exitCode(ws), Duration: time.Since(f.start), Reason: "client gone"})
			return
		}
		resp := Response{ID: req.ID, Exited: true, Status: int(ws)}
		resp.OOMKills, resp.MemoryMB = c.s.oomKillsSince(oomsBefore, ws)
		_ = c.conn.Send(resp)
	}()
}

// oomKills is the sandbox's OOM kill count so far (0 when it cannot
// tell).
func (s *Server) oomKills() int {
	oc, ok := s.sb.(OOMCounter)
	if !ok {
		return 0
	}
	n, _ := oc.OOMKills()
	return n
}

// oomKillsSince is how many processes the memory limit killed since the
// count was before, and the limit, for a command that ended with ws. The
// kernel counts a kill just after it sends the SIGKILL: for a command
// that died of SIGKILL with no kill counted yet, the count is read once
// more a moment later.
func (s *Server) oomKillsSince(before int, ws syscall.WaitStatus) (int, int64) {
	oc, ok := s.sb.(OOMCounter)
	if !ok {
		return 0, 0
	}
	n, limit := oc.OOMKills()
	if n <= before && ws.Signaled() && ws.Signal() == syscall.SIGKILL && limit > 0 {
		time.Sleep(oomRecheck)
		n, limit = oc.OOMKills()
	}
	if n <= before {
		return 0, 0
	}
	return n - before, limit
}

// oomRecheck is how long oomKillsSince waits before it reads the count
// again.
const oomRecheck = 20 * time.Millisecond

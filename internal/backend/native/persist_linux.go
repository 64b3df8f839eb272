package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/idletrim"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Persistent sandboxes. Start boots the same three-stage sandbox as Run,
// with one difference in the init: once the root is ready it does not
// release an exec stage with a command and wait for it; it stays PID 1 as
// the sandbox's agent and serves requests (package agent): first on the
// config socket, fd 3, where the supervisor hands it the sandbox's
// listening socket (OpServe); from then on on every client connection
// accepted there, each with its own request IDs. Each exec forks a fresh exec stage exactly as a run does
// (stub or Go, own user namespace, bounding set, ids, no_new_privs,
// Landlock, the same seccomp program, inside the init's cgroup), with the
// caller's descriptors as its fds 0-2. File operations run in the agent
// itself, whose root is the sandbox's root, through agent.FS (openat2,
// RESOLVE_IN_ROOT). The writable layer lives on disk (dir/upper and
// dir/work), so a stopped sandbox keeps its files.

// Instance is a running persistent sandbox, owned by the process that
// called Start (the supervisor): the init dies with it (Pdeathsig).
type Instance struct {
	r     *runState
	pid   int
	conn  *agent.Conn
	start time.Time

	done    chan struct{}
	ws      syscall.WaitStatus
	initErr error
}

// Start boots a persistent sandbox for spec whose writable layer lives in
// dir (upper/, work/, created when missing). stderr receives the init's
// own diagnostics.
func (b *Backend) Start(ctx context.Context, spec *sandbox.Spec, dir string, stderr *os.File) (*Instance, error) {
	if spec.Network.Mode == sandbox.NetworkFull {
		return nil, fmt.Errorf("network egress is %w yet by the native backend", sandbox.ErrUnsupported)
	}
	r := &runState{b: b, spec: spec, id: spec.ID, persistent: true}
	if r.id == "" {
		r.id = randomID()
	}
	if os.Geteuid() == 0 && !spec.Security.HostUserNS {
		base, err := b.persistentIDs(spec, dir)
		if err != nil {
			return nil, err
		}
		r.idBase = base
	}
	inst, err := r.startPersistent(ctx, dir, stderr)
	if err != nil {
		r.cleanup()
		return nil, err
	}
	return inst, nil
}

func (r *runState) startPersistent(ctx context.Context, dir string, stderr *os.File) (*Instance, error) {
	cfg, err := r.buildConfig()
	if err != nil {
		return nil, err
	}
	if err := r.makeCgroup(cfg); err != nil {
		return nil, err
	}
	cfg.Persistent = true
	if !cfg.Host {
		for _, d := range []string{"upper", "work"} {
			p := filepath.Join(dir, d)
			if err := os.MkdirAll(p, 0o755); err != nil {
				return nil, err
			}
			if err := os.Lchown(p, cfg.RootUID, cfg.RootGID); err != nil && !cfg.Rootless {
				return nil, err
			}
		}
		cfg.Upper = dir
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devNull.Close()
	if stderr == nil {
		stderr = devNull
	}
	// The same fork as a run's (launch): config queued, cgroup joined and
	// seccomp filter sent while the init boots. The config socket then
	// carries the agent protocol.
	l, err := r.launch(cfg, &stdioFiles{child: [3]*os.File{devNull, stderr, stderr}})
	if err != nil {
		return nil, err
	}
	pid := l.pid
	inst := &Instance{r: r, pid: pid, conn: agent.NewConn(l.sock), start: time.Now(), done: make(chan struct{})}
	go func() {
		ex := <-l.waitCh
		inst.ws = ex.ws
		if msg := <-l.errCh; len(msg) > 0 {
			inst.initErr = parseInitError(msg)
		}
		close(inst.done)
	}()
	ready := make(chan error, 1)
	go func() {
		var resp agent.Response
		_, err := inst.conn.Recv(&resp)
		if err == nil && !resp.Ready {
			err = errors.New("unexpected first message from the sandbox agent")
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err == nil {
			return inst, nil
		}
		_ = unix.Kill(pid, unix.SIGKILL)
		<-inst.done
		if inst.initErr != nil {
			return nil, inst.initErr
		}
		return nil, fmt.Errorf("the sandbox init failed (%v)", err)
	case <-ctx.Done():
		_ = unix.Kill(pid, unix.SIGKILL)
		<-inst.done
		return nil, ctx.Err()
	}
}

// Pid is the init's pid in the caller's PID namespace.
func (i *Instance) Pid() int { return i.pid }

// Conn is the connection to the sandbox's agent.
func (i *Instance) Conn() *agent.Conn { return i.conn }

// Done is closed when the init has exited.
func (i *Instance) Done() <-chan struct{} { return i.done }

// ExitReason describes how the init ended (after Done): "" for a stop
// it was asked for.
func (i *Instance) ExitReason() string { return ExitReason(i.ws, i.initErr) }

// ExitReason describes how a persistent sandbox's init ended, from its
// wait status and the error it reported (nil when none): "" when it
// stopped because it was asked to (exit status 0).
func ExitReason(ws syscall.WaitStatus, initErr error) string {
	switch {
	case initErr != nil:
		return "sandbox init failed: " + initErr.Error()
	case ws.Signaled():
		return "sandbox init killed by signal " + strconv.Itoa(int(ws.Signal()))
	case ws.ExitStatus() != 0:
		return "sandbox init exited with status " + strconv.Itoa(ws.ExitStatus())
	}
	return ""
}

// Kill ends the sandbox at once.
func (i *Instance) Kill() {
	_ = unix.Kill(i.pid, unix.SIGKILL)
	if i.r.cg != nil {
		i.r.cg.kill()
	}
}

// Close releases what the sandbox holds on the host (its cgroup) once
// the init has exited.
func (i *Instance) Close() {
	<-i.done
	i.conn.Close()
	i.r.cleanup()
}

// ProcRSS is a process's resident set in bytes (0 if unknown).
func ProcRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.ParseInt(f[1], 10, 64)
	return n * int64(os.Getpagesize())
}

// RemoveCgroups removes the (empty or not) cgroups of the sandbox with
// the given id, for GC after a supervisor was killed.
func RemoveCgroups(id string) []string {
	var removed []string
	for _, parent := range cgroupParents() {
		d := filepath.Join(parent, cgroupPrefix+id)
		if _, err := os.Stat(d); err != nil {
			continue
		}
		if removeCgroupDir(d) == nil {
			removed = append(removed, d)
		}
	}
	return removed
}

// ---- the agent side: the init as PID 1 of a persistent sandbox ----

// retireExecStage ends the exec stage forked at boot: a persistent
// sandbox forks one per exec instead. (It was still needed for the boot:
// its user namespace idmaps volumes.)
func (s *initState) retireExecStage() error {
	for _, f := range s.cgroupProcs {
		f.Close()
	}
	s.cgroupProcs = nil
	_ = unix.Kill(s.execPid, unix.SIGKILL)
	var ws unix.WaitStatus
	_, _ = unix.Wait4(s.execPid, &ws, 0, nil)
	if s.execCfgW != nil {
		s.execCfgW.Close()
	}
	if s.stubErrR != nil {
		s.stubErrR.Close()
	}
	if s.usernsFd >= 0 {
		unix.Close(s.usernsFd)
		s.usernsFd = -1
	}
	s.execPid = 0
	return nil
}

// idleTrimAfter is how long a persistent init waits without a request
// before it trims its resident memory (package idletrim).
const idleTrimAfter = 10 * time.Second

// agentProc is one exec'd command.
type agentProc struct {
	id      uint64
	pid     int
	owner   *agentState // the connection that started it
	started bool
	failed  bool
	exited  bool
	ws      unix.WaitStatus
}

// agentShared is the persistent init's state common to all its
// connections: the processes it started and the stop request.
type agentShared struct {
	s     *initState
	fs    *agent.FS
	start time.Time
	trim  *idletrim.Trimmer

	mu    sync.Mutex
	procs map[int]*agentProc
	early map[int]unix.WaitStatus
	// serving: the supervisor handed the sandbox's socket over
	// (OpServe). The agent holds no descriptor of a host path for it:
	// the client marks activity, the reaper removes the socket.
	serving bool

	stop chan stopRequest
}

// stopRequest is who asked the sandbox to stop (conn nil: a signal, or
// the supervisor gone before it handed the socket over).
type stopRequest struct {
	conn *agent.Conn
	id   uint64
}

// agentState is one connection to the agent: the supervisor's (fd 3)
// or a client's, accepted on the sandbox's socket. Request IDs are the
// connection's own.
type agentState struct {
	*agentShared
	conn *agent.Conn
	byID map[uint64]*agentProc // guarded by agentShared.mu
}

// serve is the persistent init's life: answer requests until told to
// stop (OpStop, SIGTERM, or the supervisor's end of the socket closing
// before it handed the sandbox's socket over). Once the supervisor sent
// OpServe with the listening socket, clients connect to the init
// directly and the supervisor may go (it becomes a waiting stub,
// ExecWaiter).
func (s *initState) serve() int {
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 125
	}
	sh := &agentShared{s: s, start: time.Now(),
		fs:    &agent.FS{Root: root, InSandbox: true, UID: s.cfg.RootUID, GID: s.cfg.RootGID},
		procs: map[int]*agentProc{}, early: map[int]unix.WaitStatus{},
		stop: make(chan stopRequest, 1)}
	// The agent idles between requests: give memory back meanwhile.
	sh.trim = idletrim.New(idleTrimAfter)
	defer sh.trim.Stop()
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, unix.SIGCHLD)
	go func() {
		for range chld {
			sh.reap()
		}
	}()
	go func() {
		for sig := range s.sigs {
			if sig == unix.SIGTERM || sig == unix.SIGINT || sig == unix.SIGHUP {
				sh.requestStop(stopRequest{})
			}
		}
	}()
	parent := sh.newConn(agent.NewConn(s.sock))
	go parent.serveConn(true)
	if err := parent.conn.Send(agent.Response{Ready: true}); err != nil {
		return 125
	}
	req := <-sh.stop
	sh.shutdown()
	if req.conn != nil {
		_ = req.conn.Send(agent.Response{ID: req.id, Exited: true})
	}
	return 0
}

func (sh *agentShared) newConn(c *agent.Conn) *agentState {
	return &agentState{agentShared: sh, conn: c, byID: map[uint64]*agentProc{}}
}

func (sh *agentShared) requestStop(r stopRequest) {
	select {
	case sh.stop <- r:
	default:
	}
}

// serveConn reads one connection's requests until it closes. A client's
// connection is closed then: commands it started run on, and their
// exit reports go nowhere.
func (a *agentState) serveConn(fromSupervisor bool) {
	if !fromSupervisor {
		defer a.conn.Close()
	}
	for {
		var req agent.Request
		fds, err := a.conn.Recv(&req)
		if err != nil {
			a.mu.Lock()
			serving := a.serving
			a.mu.Unlock()
			if fromSupervisor && !serving {
				a.requestStop(stopRequest{})
			}
			return
		}
		switch req.Op {
		case agent.OpStop:
			agent.CloseFds(fds)
			a.requestStop(stopRequest{conn: a.conn, id: req.ID})
		case agent.OpServe:
			a.startServing(fromSupervisor, req, fds)
		case agent.OpStats:
			agent.CloseFds(fds)
			st := agent.Stats{UptimeSeconds: time.Since(a.start).Seconds(), InitRSS: ProcRSS(os.Getpid()), Pids: countProcs("/proc")}
			_ = a.conn.Send(agent.Response{ID: req.ID, Stats: &st})
		default:
			idle := a.trim.Busy()
			go func() {
				defer idle()
				a.handle(req, fds)
			}()
		}
	}
}

// startServing takes over the sandbox's listening socket (the one
// descriptor attached) from the supervisor.
func (a *agentState) startServing(fromSupervisor bool, req agent.Request, fds []int) {
	a.mu.Lock()
	ok := fromSupervisor && !a.serving && len(fds) == 1
	if ok {
		a.serving = true
	}
	a.mu.Unlock()
	if !ok {
		agent.CloseFds(fds)
		_ = a.conn.Send(agent.Response{ID: req.ID, Error: "serve: refused", Kind: "setup"})
		return
	}
	go a.accept(fds[0])
	_ = a.conn.Send(agent.Response{ID: req.ID})
}

// accept serves every client that connects to the sandbox's socket.
func (sh *agentShared) accept(lfd int) {
	for {
		nfd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
		if err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ECONNABORTED) {
				continue
			}
			return
		}
		go sh.newConn(agent.NewConn(os.NewFile(uintptr(nfd), "client"))).serveConn(false)
	}
}

// countProcs counts the processes a /proc shows.
func countProcs(proc string) int {
	ents, _ := os.ReadDir(proc)
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			n++
		}
	}
	return n
}

// shutdown sends SIGTERM to every process of the sandbox, waits up to
// termGrace for them to end, then kills what is left.
func (a *agentShared) shutdown() {
	_ = unix.Kill(-1, unix.SIGTERM)
	deadline := time.Now().Add(termGrace)
	for time.Now().Before(deadline) {
		if !a.reap() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = unix.Kill(-1, unix.SIGKILL)
}

// reap collects every exited child and reports the commands' statuses.
// It returns whether children remain.
func (a *agentShared) reap() bool {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false
		}
		if pid <= 0 {
			return true
		}
		a.mu.Lock()
		p := a.procs[pid]
		switch {
		case p == nil:
			a.early[pid] = ws
		case p.failed:
			delete(a.procs, pid)
		case p.started:
			delete(a.procs, pid)
			delete(p.owner.byID, p.id)
			_ = p.owner.conn.Send(agent.Response{ID: p.id, Exited: true, Status: int(ws)})
		default:
			p.exited, p.ws = true, ws
		}
		a.mu.Unlock()
	}
}

func (a *agentState) fail(id uint64, err error) {
	resp := agent.Response{ID: id, Error: err.Error(), Kind: "path"}
	var en syscall.Errno
	if errors.As(err, &en) {
		resp.Errno = int(en)
	}
	if errors.Is(err, agent.ErrRefused) {
		resp.Kind = "refused"
	}
	_ = a.conn.Send(resp)
}

func (a *agentState) handle(req agent.Request, fds []int) {
	if req.Op == agent.OpExec {
		a.exec(req, fds)
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
	defer agent.CloseFds(fds)
	needFile := func() bool {
		if file == nil {
			_ = a.conn.Send(agent.Response{ID: req.ID, Error: "no descriptor attached", Kind: "setup"})
			return false
		}
		return true
	}
	switch req.Op {
	case agent.OpPing:
		_ = a.conn.Send(agent.Response{ID: req.ID})
	case agent.OpSignal:
		a.mu.Lock()
		p := a.byID[req.Target]
		a.mu.Unlock()
		if p != nil && req.Signal > 0 {
			_ = unix.Kill(p.pid, syscall.Signal(req.Signal))
		}
		_ = a.conn.Send(agent.Response{ID: req.ID})
	case agent.OpRead:
		if !needFile() {
			return
		}
		f, err := a.fs.Open(req.Path)
		if err != nil {
			a.fail(req.ID, err)
			return
		}
		n, err := io.Copy(file, f)
		f.Close()
		file.Close()
		if err != nil {
			a.fail(req.ID, err)
			return
		}
		_ = a.conn.Send(agent.Response{ID: req.ID, Size: n})
	case agent.OpWrite:
		if !needFile() {
			return
		}
		f, err := a.fs.Create(req.Path, req.Mode)
		if err != nil {
			a.fail(req.ID, err)
			return
		}
		n, err := io.Copy(f, file)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			a.fail(req.ID, err)
			return
		}
		_ = a.conn.Send(agent.Response{ID: req.ID, Size: n})
	case agent.OpDelete:
		if err := a.fs.Delete(req.Path, req.Recursive); err != nil {
			a.fail(req.ID, err)
			return
		}
		_ = a.conn.Send(agent.Response{ID: req.ID})
	case agent.OpList:
		ents, err := a.fs.List(req.Path)
		if err != nil {
			a.fail(req.ID, err)
			return
		}
		_ = a.conn.Send(agent.Response{ID: req.ID, Entries: ents})
	case agent.OpStat:
		e, err := a.fs.Stat(req.Path)
		if err != nil {
			a.fail(req.ID, err)
			return
		}
		_ = a.conn.Send(agent.Response{ID: req.ID, Stat: &e})
	case agent.OpTarOut:
		if !needFile() {
			return
		}
		err := a.fs.TarOut(req.Path, file)
		file.Close()
		if err != nil {
			a.fail(req.ID, err)
			return
		}
		_ = a.conn.Send(agent.Response{ID: req.ID})
	case agent.OpTarIn:
		if !needFile() {
			return
		}
		if err := a.fs.MkdirAll(req.Path); err != nil {
			a.fail(req.ID, err)
			return
		}
		if err := a.fs.TarIn(req.Path, file); err != nil {
			a.fail(req.ID, err)
			return
		}
		_ = a.conn.Send(agent.Response{ID: req.ID})
	default:
		_ = a.conn.Send(agent.Response{ID: req.ID, Error: "unknown op " + strconv.Quote(req.Op), Kind: "setup"})
	}
}

// exec forks an exec stage for the request, exactly as a run's, with the
// passed descriptors as its stdio.
func (a *agentState) exec(req agent.Request, fds []int) {
	defer agent.CloseFds(fds)
	s := a.s
	er := req.Exec
	if er == nil || len(er.Args) == 0 || len(fds) != 3 {
		_ = a.conn.Send(agent.Response{ID: req.ID, Error: "exec needs a command and three descriptors", Kind: "setup"})
		return
	}
	c := s.cfg.Exec
	env := c.Env
	if s.homeAdded && len(env) > 0 {
		env = env[:len(env)-1]
	}
	c.Args = er.Args
	c.TTY = er.TTY
	c.Env = mergeEnv(env, er.Env, er.TTY)
	if er.Workdir != "" {
		c.Workdir = er.Workdir
	}
	if er.User != "" {
		c.User = er.User
	}
	u, err := resolveUser("", -1, c.User)
	if err != nil {
		_ = a.conn.Send(agent.Response{ID: req.ID, Error: err.Error(), Kind: "setup"})
		return
	}
	c.UID, c.GID, c.Groups = u.uid, u.gid, u.groups
	if !hasEnv(c.Env, "HOME") {
		c.Env = append(c.Env, "HOME="+u.home)
	}
	cfg := *s.cfg
	cfg.Exec = c
	if argBytes(c.Args)+argBytes(c.Env) > stubArgBudget {
		cfg.GoExecStage = true
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		_ = a.conn.Send(agent.Response{ID: req.ID, Error: err.Error(), Kind: "setup"})
		return
	}
	defer errR.Close()
	es := &initState{cfg: &cfg, errW: errW, proc: "/proc", usernsFd: -1, ownerNsFd: -1, cgroupFD: -1,
		stdio: [3]uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])}}
	err = es.startExecStage()
	if err != nil {
		errW.Close()
		_ = a.conn.Send(agent.Response{ID: req.ID, Error: err.Error(), Kind: "setup"})
		return
	}
	p := &agentProc{id: req.ID, pid: es.execPid, owner: a}
	a.mu.Lock()
	a.procs[p.pid] = p
	a.byID[p.id] = p
	if ws, ok := a.early[p.pid]; ok {
		delete(a.early, p.pid)
		p.exited, p.ws = true, ws
	}
	a.mu.Unlock()
	if es.stub {
		err = es.releaseStub()
		errW.Close()
	} else {
		var ready [1]byte
		if _, err = es.execCfgW.Read(ready[:]); err == nil {
			var b []byte
			if b, err = json.Marshal(&cfg.Exec); err == nil {
				_, err = es.execCfgW.Write(b)
			}
		}
		es.execCfgW.Close()
		if es.usernsFd >= 0 {
			unix.Close(es.usernsFd)
		}
		errW.Close()
		if msg, _ := io.ReadAll(errR); len(msg) > 0 {
			err = reportedError(msg)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		resp := agent.Response{ID: req.ID, Error: err.Error(), Kind: "setup"}
		var rep reportedError
		if errors.As(err, &rep) {
			kind, rest, _ := strings.Cut(strings.TrimSpace(string(rep)), " ")
			errno, text, _ := strings.Cut(rest, " ")
			resp.Kind, resp.Error = kind, text
			resp.Errno, _ = strconv.Atoi(errno)
		}
		_ = unix.Kill(p.pid, unix.SIGKILL)
		delete(a.byID, p.id)
		if p.exited {
			delete(a.procs, p.pid)
		} else {
			p.failed = true
		}
		_ = a.conn.Send(resp)
		return
	}
	p.started = true
	_ = a.conn.Send(agent.Response{ID: req.ID, Started: true, Pid: p.pid})
	if p.exited {
		delete(a.procs, p.pid)
		delete(a.byID, p.id)
		_ = a.conn.Send(agent.Response{ID: req.ID, Exited: true, Status: int(p.ws)})
	}
}

// ExecError maps an agent's exec failure to the sandbox errors (127/126).
func ExecError(resp *agent.Response) error {
	if resp.Kind == "exec" {
		switch syscall.Errno(resp.Errno) {
		case unix.ENOENT:
			return fmt.Errorf("%s: %w", resp.Error, sandbox.ErrNotFound)
		case unix.EACCES, unix.ENOEXEC, unix.EPERM, unix.EISDIR, unix.ENOTDIR, unix.ELOOP:
			return fmt.Errorf("%s: %w", resp.Error, sandbox.ErrCannotInvoke)
		}
	}
	return errors.New(resp.Error)
}

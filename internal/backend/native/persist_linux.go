package native

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/netproc"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Persistent sandboxes. Start boots the same sandbox as a run's
// re-executed init (initConfig.Persistent). Once the root is ready the
// init retires the boot's exec stage, sends the caller (the supervisor)
// a descriptor of the sandbox's root and the resolved exec template, and
// replaces itself with the stub as the sandbox's idle PID 1
// (pid1IdleScript): no capability, locked securebits, no_new_privs, a
// seccomp filter that allows only its wait, SIGCHLD ignored so that the
// kernel reaps orphans, and a read of the config socket that returns
// when the supervisor closes it or dies.
//
// Everything else is done from outside the sandbox by the supervisor, as
// runc exec does, so no process inside the sandbox ever holds a
// privilege the sandbox's own commands do not:
//
//   - Exec forks the stub, which joins the sandbox's cgroup, enters its
//     namespaces through PID 1's pidfd (setns), gets a user namespace of
//     its own (root caller: mapped to the sandbox's block, the maps
//     written by the supervisor; rootless: PID 1's), forks into the PID
//     namespace (the stub's FORK record: the intermediate reports the
//     command's pid and exits, and the supervisor, a child subreaper,
//     adopts the command) and runs the same steps as a run's exec stage
//     before execve. The supervisor collects the status itself.
//   - File operations run in the supervisor through agent.FS on the
//     root descriptor (openat2, RESOLVE_IN_ROOT).
//   - Stop sends SIGTERM to every process of the sandbox's PID namespace
//     but PID 1, waits up to termGrace, then closes the config socket:
//     PID 1 exits and the kernel kills what is left.
//
// The writable layer lives on disk (dir/upper and dir/work), and so do
// those of copy-on-write volumes (dir/cow<i>/, initConfig.CowDir), so a
// stopped sandbox keeps its files; /tmp and /run stay tmpfs. Persistent sandboxes need the stub
// (amd64): a Go process cannot enter another user namespace.

// The native backend hosts persistent sandboxes, and its Instance is
// served by the agent server in the supervisor.
var (
	_ sandbox.PersistentBackend = (*Backend)(nil)
	_ sandbox.Instance          = (*Instance)(nil)
	_ agent.Sandbox             = (*Instance)(nil)
)

// Instance is a running persistent sandbox, owned by the process that
// called Boot (the supervisor): PID 1 dies with it (Pdeathsig, and its
// wait on the config socket).
type Instance struct {
	r     *runState
	pid   int // PID 1 in the caller's PID namespace
	pidfd int
	// rootFd is the sandbox's root (from PID 1, after pivot_root).
	rootFd int
	// exec is the template of every command (the image's environment,
	// working directory, user, Landlock paths, the seccomp program);
	// homeAdded says its last Env entry is a HOME the init derived.
	exec      execConfig
	homeAdded bool
	// umask is the supervisor's own umask when the sandbox booted, which
	// the armed exec stage sets (a stub forked in the background must not
	// take a umask the process holds for a moment, e.g. around a bind).
	umask int
	// rootUID/rootGID: the sandbox root's host ids.
	rootUID, rootGID int
	// rootless: PID 1's user namespace is the caller's (no block of host
	// ids; commands share that namespace).
	rootless bool
	sock     *os.File // the config socket, which PID 1 waits on
	endOnce  sync.Once
	// netDev is the sandbox's TUN device or proxy socket (netMode) until
	// its network helper has it.
	netDev  *os.File
	netMode netproc.Mode
	start   time.Time

	done    chan struct{}
	ws      syscall.WaitStatus
	initErr error

	// The pre-armed exec stage (persist_armed_linux.go): armed waits
	// for a request; arming is closed once the one being armed (pid
	// armPid, once started) is armed or failed; armStopped: no more.
	armMu      sync.Mutex
	armed      *armedStub
	arming     chan struct{}
	armPid     int
	armStopped bool
}

// persistReady is the init's last message before it becomes the idle
// PID 1.
type persistReady struct {
	Exec      execConfig `json:"exec"`
	HomeAdded bool       `json:"home_added,omitempty"`
	// NetMode says what the third descriptor is, when there is one.
	NetMode netproc.Mode `json:"net_mode,omitempty"`
}

// Boot boots a persistent sandbox for spec whose writable layer lives in
// dir (upper/, work/, created when missing). stderr receives the init's
// own diagnostics. The Instance is an *Instance.
func (b *Backend) Boot(ctx context.Context, spec *sandbox.Spec, dir string, stderr *os.File) (sandbox.Instance, error) {
	if execStub == "" {
		return nil, fmt.Errorf("persistent sandboxes need the exec stub, which is built for amd64 only: %w", sandbox.ErrUnsupported)
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
	cfg.GoExecStage = false
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
	cfg.CowDir = dir
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devNull.Close()
	if stderr == nil {
		stderr = devNull
	}
	// The same fork as a run's (launch): config queued, cgroup joined and
	// seccomp filter sent while the init boots.
	l, err := r.launch(cfg, &stdioFiles{child: [3]*os.File{devNull, stderr, stderr}})
	if err != nil {
		return nil, err
	}
	inst := &Instance{r: r, pid: l.pid, pidfd: -1, rootFd: -1, sock: l.sock, start: time.Now(), done: make(chan struct{}),
		rootUID: cfg.RootUID, rootGID: cfg.RootGID, rootless: cfg.Rootless}
	go func() {
		ex := <-l.waitCh
		inst.ws = ex.ws
		if msg := <-l.errCh; len(msg) > 0 {
			inst.initErr = parseInitError(msg)
		}
		inst.disarm()
		// The sandbox's network goes with it.
		rep, _ := r.stopNetwork()
		if f := r.b.opts.OnSecretInjections; f != nil && len(rep.Injections) > 0 {
			f(r.spec, rep.Injections)
		}
		if inst.netDev != nil {
			inst.netDev.Close()
		}
		close(inst.done)
	}()
	ready := make(chan error, 1)
	go func() {
		err := inst.readReady()
		if err == nil {
			// PID 1 is the stub now, and says so once it holds nothing.
			var b [8]byte
			if n, rerr := unix.Read(int(inst.sock.Fd()), b[:]); rerr != nil || n != 1 {
				err = fmt.Errorf("PID 1 did not lock down (%v)", rerr)
			}
		}
		ready <- err
	}()
	fail := func(err error) (*Instance, error) {
		_ = unix.Kill(l.pid, unix.SIGKILL)
		<-inst.done
		inst.closeFds()
		if inst.initErr != nil {
			return nil, inst.initErr
		}
		return nil, err
	}
	select {
	case err := <-ready:
		if err != nil {
			return fail(fmt.Errorf("the sandbox init failed (%v)", err))
		}
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	if inst.pidfd, err = unix.PidfdOpen(l.pid, 0); err != nil {
		return fail(fmt.Errorf("pidfd of the sandbox's PID 1: %w", err))
	}
	if inst.netDev != nil {
		dev := inst.netDev
		inst.netDev = nil
		var ns *os.File
		if inst.netMode == netproc.ModeProxy {
			if fd, err := unix.FcntlInt(uintptr(inst.pidfd), unix.F_DUPFD_CLOEXEC, 0); err == nil {
				ns = os.NewFile(uintptr(fd), "sandbox pidfd")
			}
		}
		if err := r.startNetwork(dev, inst.netMode, ns); err != nil {
			return fail(err)
		}
		if err := r.networkReady(ctx); err != nil {
			return fail(err)
		}
	}
	// The stub that starts a command forks it into the sandbox's PID
	// namespace and exits: the command is then ours to reap.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("becoming a child subreaper: %w", err))
	}
	// Read while nothing else of the sandbox forks (armAsync starts
	// below): umask has no read-only form.
	inst.umask = unix.Umask(0o022)
	unix.Umask(inst.umask)
	inst.armAsync()
	return inst, nil
}

// readReady reads the init's persistReady message: 'R' with the root's
// descriptor and a memfd holding the JSON.
func (i *Instance) readReady() error {
	var b [8]byte
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := unix.Recvmsg(int(i.sock.Fd()), b[:], oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return err
	}
	var fds []int
	if oobn > 0 {
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
			fds, _ = unix.ParseUnixRights(&msgs[0])
		}
	}
	if n != 1 || b[0] != 'R' || len(fds) != 2+btoi(i.r.spec.Network.Mode.Egress()) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return errors.New("unexpected message from the sandbox init")
	}
	i.rootFd = fds[0]
	if len(fds) == 3 {
		i.netDev = os.NewFile(uintptr(fds[2]), "network")
	}
	f := os.NewFile(uintptr(fds[1]), "ready")
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	var m persistReady
	if err := json.NewDecoder(io.LimitReader(f, 64<<20)).Decode(&m); err != nil {
		return fmt.Errorf("the sandbox init's exec template: %w", err)
	}
	i.exec, i.homeAdded, i.netMode = m.Exec, m.HomeAdded, m.NetMode
	if i.netDev != nil && i.netMode == "" {
		return errors.New("the sandbox init sent a network device without saying what it is")
	}
	return nil
}

// NetworkProxied says whether the sandbox's network is in proxy mode
// (no TUN device, so no address of its own).
func (i *Instance) NetworkProxied() bool { return i.netMode == netproc.ModeProxy }

// Pid is PID 1's pid in the caller's PID namespace.
func (i *Instance) Pid() int { return i.pid }

// Done is closed when PID 1 has exited.
func (i *Instance) Done() <-chan struct{} { return i.done }

// ExitReason describes how PID 1 ended (after Done): "" for a stop it was
// asked for.
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
		return "sandbox init exited with status " + strconv.Itoa(int(ws.ExitStatus()))
	}
	return ""
}

// Kill ends the sandbox at once.
func (i *Instance) Kill() {
	_ = unix.Kill(i.pid, unix.SIGKILL)
	i.disarm()
	if i.r.cg != nil {
		i.r.cg.kill()
	}
}

// end has PID 1 exit (status 0) by closing the socket it waits on; the
// PID namespace's teardown kills what is left.
func (i *Instance) end() {
	i.endOnce.Do(func() { i.sock.Close() })
}

// Stop sends SIGTERM to every process of the sandbox but PID 1, waits up
// to termGrace for them to end, then ends PID 1 (and with it whatever is
// left) and returns once it has exited.
func (i *Instance) Stop() {
	i.disarm()
	for _, p := range i.members() {
		if p != i.pid {
			_ = unix.Kill(p, unix.SIGTERM)
		}
	}
	deadline := time.Now().Add(termGrace)
	for time.Now().Before(deadline) && len(i.members()) > 1 {
		select {
		case <-i.done:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	i.end()
	<-i.done
}

// members lists the host pids of the processes in the sandbox's PID
// namespace, PID 1 included.
func (i *Instance) members() []int {
	var want unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(i.pid)+"/ns/pid", &want); err != nil {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+e.Name()+"/ns/pid", &st) == nil && st.Ino == want.Ino && st.Dev == want.Dev {
			out = append(out, p)
		}
	}
	return out
}

// Stats reports the sandbox's uptime, its processes and PID 1's resident
// set (the caller adds its own and the cgroup's figures).
func (i *Instance) Stats() agent.Stats {
	return agent.Stats{UptimeSeconds: time.Since(i.start).Seconds(), InitRSS: agent.ProcRSS(i.pid), Pids: len(i.members())}
}

// FS does file operations in the sandbox's root. Files created are the
// sandbox root's (as root: its block's first id; rootless: the caller,
// who is root inside).
func (i *Instance) FS() *agent.FS {
	uid, gid := i.rootUID, i.rootGID
	if i.rootless {
		uid, gid = -1, -1
	}
	return &agent.FS{Root: i.rootFd, InSandbox: true, UID: uid, GID: gid}
}

// Close releases what the sandbox holds on the host (its cgroup, the
// descriptors) once PID 1 has exited.
func (i *Instance) Close() {
	<-i.done
	i.disarm()
	i.end()
	i.closeFds()
	i.r.cleanup()
}

func (i *Instance) closeFds() {
	for _, fd := range []*int{&i.rootFd, &i.pidfd} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// OOMKills is how many of the sandbox's processes the memory limit's OOM
// killer has ended since it started (its cgroup's counter), and that
// limit in MiB; 0, 0 without a memory limit or a cgroup.
func (i *Instance) OOMKills() (int, int64) {
	if i.r.cg == nil || i.r.spec.Resources.MemoryMB <= 0 {
		return 0, 0
	}
	return i.r.cg.oomKills(), i.r.spec.Resources.MemoryMB
}

// Exec starts a command in the sandbox (see the top of this file) with
// stdio as its descriptors 0-2.
func (i *Instance) Exec(req *agent.ExecRequest, stdio [3]int) (agent.Process, error) {
	setupErr := func(err error) error { return &agent.ExecError{Kind: agent.KindSetup, Msg: err.Error()} }
	c := i.exec
	env := c.Env
	if i.homeAdded && len(env) > 0 {
		env = env[:len(env)-1]
	}
	c.Args = req.Args
	c.TTY = req.TTY
	c.Env = mergeEnv(env, req.Env, req.TTY)
	if req.Workdir != "" {
		c.Workdir = req.Workdir
	}
	defaultUser := req.User == "" || req.User == c.User
	if req.User != "" {
		c.User = req.User
	}
	u, err := resolveUser("", i.rootFd, c.User)
	if err != nil {
		return nil, setupErr(err)
	}
	c.UID, c.GID, c.Groups = u.uid, u.gid, u.groups
	if !hasEnv(c.Env, "HOME") {
		c.Env = append(c.Env, "HOME="+u.home)
	}
	if argBytes(c.Args)+argBytes(c.Env) > stubArgBudget {
		return nil, &agent.ExecError{Kind: agent.KindExec, Errno: unix.E2BIG,
			Msg: fmt.Sprintf("exec %s: %v: the arguments and environment are over the %d KiB the exec stub carries", c.Args[0], unix.E2BIG, stubArgBudget>>10)}
	}
	p, err := lookPathIn(i.rootFd, c.Args[0], c.Env, c.Workdir)
	if err != nil {
		errno := syscall.Errno(0)
		errors.As(err, &errno)
		return nil, &agent.ExecError{Kind: agent.KindExec, Errno: errno, Msg: err.Error()}
	}
	c.rootFd, c.inRoot = i.rootFd, true
	if !c.TTY {
		return i.startCommand(&c, p, stdio, defaultUser)
	}
	// The terminal comes from the sandbox's own devpts (its /dev/pts/N
	// exists inside), bridged to the caller's.
	uid, gid := -1, -1
	if !i.rootless {
		uid, gid = i.rootUID+c.UID, i.rootGID+5 // tty
	}
	t, err := openSandboxPTY(i.rootFd, stdio[0], stdio[1], uid, gid)
	if err != nil {
		return nil, setupErr(err)
	}
	proc, err := i.startCommand(&c, p, [3]int{t.slave, t.slave, t.slave}, defaultUser)
	t.closeSlave()
	if err != nil {
		t.close()
		return nil, err
	}
	t.bridge()
	return proc, nil
}

// startCommand starts the command with the armed stub when there is one
// that fits (persist_armed_linux.go), else with a stub of its own
// (startExec), and has the next stub armed.
func (i *Instance) startCommand(c *execConfig, path string, stdio [3]int, defaultUser bool) (agent.Process, error) {
	defer i.armAsync()
	if a := i.takeArmed(c, defaultUser); a != nil {
		if p, served, err := i.startArmed(a, c, path, stdio); served {
			return p, err
		}
	}
	return i.startExec(c, path, stdio)
}

// startExec forks the stub that starts the command (see the top of this
// file) and waits until the command runs or its start failed.
func (i *Instance) startExec(c *execConfig, path string, stdio [3]int) (agent.Process, error) {
	setupErr := func(err error) error { return &agent.ExecError{Kind: agent.KindSetup, Msg: err.Error()} }
	c.filterLoaded = false // its stub loads no filter before the fork
	rootless := i.rootless
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, setupErr(err)
	}
	sock := os.NewFile(uintptr(sp[0]), "exec")
	defer sock.Close()
	child := os.NewFile(uintptr(sp[1]), "exec-child")
	errR, errW, err := os.Pipe()
	if err != nil {
		child.Close()
		return nil, setupErr(err)
	}
	defer errR.Close()
	files := []uintptr{uintptr(stdio[0]), uintptr(stdio[1]), uintptr(stdio[2]), child.Fd(), errW.Fd()}
	var tasks []*os.File
	sys := &syscall.SysProcAttr{}
	if cg := i.r.cg; cg != nil {
		if fd := cg.openDir(); fd >= 0 { // v2: cloned into it
			defer unix.Close(fd)
			sys.UseCgroupFD, sys.CgroupFD = true, fd
		} else if tasks, err = cg.openTasks(); err != nil { // v1: it moves itself in
			child.Close()
			errW.Close()
			return nil, setupErr(err)
		}
	}
	for _, f := range tasks {
		files = append(files, f.Fd())
	}
	pidfdNum := len(files)
	files = append(files, uintptr(i.pidfd))
	join, rest, err := execJoinScripts(c, path, len(tasks), pidfdNum, rootless)
	if err != nil {
		child.Close()
		errW.Close()
		closeFiles(tasks)
		return nil, setupErr(err)
	}
	pid, err := startStub(argv0Exec, files, sys)
	child.Close()
	errW.Close()
	closeFiles(tasks)
	if err != nil {
		return nil, setupErr(fmt.Errorf("starting the exec stage: %w", err))
	}
	intermediate := pid
	reaped := false
	defer func() {
		if !reaped {
			_ = unix.Kill(intermediate, unix.SIGKILL)
			reap(intermediate)
		}
	}()
	report := func(s *stubScript) error {
		var rep [16]byte
		n, _ := io.ReadFull(errR, rep[:])
		return execFailure(stubError(s, rep[:n]))
	}
	b, err := join.encode()
	if err == nil {
		_, err = sock.Write(b)
	}
	if err != nil {
		return nil, setupErr(err)
	}
	if rest != nil {
		// Root: the stub waits in its new user namespace for its maps.
		var ready [1]byte
		if _, err := io.ReadFull(sock, ready[:]); err != nil {
			return nil, report(join)
		}
		if err := i.writeMaps(pid); err != nil {
			return nil, setupErr(err)
		}
		if b, err = rest.encode(); err == nil {
			_, err = sock.Write(b)
		}
		if err != nil {
			return nil, setupErr(err)
		}
	} else {
		rest = join
	}
	// The intermediate forks the command, reports its pid and exits.
	var pidb [8]byte
	if _, err := io.ReadFull(sock, pidb[:]); err != nil {
		return nil, report(rest)
	}
	reap(intermediate)
	reaped = true
	cmd := int(binary.LittleEndian.Uint64(pidb[:]))
	p := &execProc{pid: cmd, done: make(chan struct{})}
	// Its pid in the sandbox, before it may end.
	p.nspid = nsPid(cmd)
	var rep [16]byte
	if n, _ := io.ReadFull(errR, rep[:]); n > 0 {
		reap(cmd) // it ended (125) after its report; it is ours since the intermediate exited
		return nil, execFailure(stubError(rest, rep[:n]))
	}
	go p.wait()
	return p, nil
}

// addJoinSteps adds an exec stage's join of a persistent sandbox to
// join: the cgroup (one write per v1 tasks file, descriptors after
// fdErr), the sandbox's namespaces through PID 1's pidfd (pidfdNum; its
// user namespace too when rootless), the inherited descriptors closed,
// then a cgroup namespace (and, for a root caller, a user namespace) of
// its own. execJoinScripts and the armed stage's armScriptsAt both join
// this way.
func addJoinSteps(join *stubScript, tasks, pidfdNum int, rootless bool) {
	for t := 0; t < tasks; t++ {
		join.add("joining cgroup", unix.SYS_WRITE, fdErr+1+t, join.cstr("0"), 1)
	}
	ns := unix.CLONE_NEWNS | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWPID
	if rootless {
		ns |= unix.CLONE_NEWUSER
	}
	join.add("entering the sandbox's namespaces", unix.SYS_SETNS, pidfdNum, ns)
	k := join.add("closing inherited descriptors", unix.SYS_CLOSE_RANGE, fdErr+1, ^uint64(0), 0)
	join.recs[k].flags |= stubIgnore
	own := unix.CLONE_NEWCGROUP
	if !rootless {
		own |= unix.CLONE_NEWUSER
	}
	join.add("entering namespaces", unix.SYS_UNSHARE, own)
}

// execJoinScripts builds the scripts of a persistent sandbox's exec
// stage: join (cgroup, the sandbox's namespaces through PID 1's pidfd, a
// user namespace and a cgroup namespace of its own) and, for a root
// caller, rest after the supervisor wrote the user namespace's maps
// (fork into the PID namespace, session, terminal, the exec stage's
// steps, seccomp, execve). Rootless, rest is nil: one script does it all
// in PID 1's user namespace.
func execJoinScripts(c *execConfig, path string, tasks, pidfdNum int, rootless bool) (join, rest *stubScript, err error) {
	join = &stubScript{recs: make([]stubRecord, 0, 128), data: make([]byte, 0, 8<<10)}
	addJoinSteps(join, tasks, pidfdNum, rootless)
	start := join
	if !rootless {
		join.add("reporting ready", unix.SYS_WRITE, 3, uint64(stubBase), 1)
		join.add("reading script", stubChain)
		rest = &stubScript{recs: make([]stubRecord, 0, 128), data: make([]byte, 0, 8<<10)}
		start = rest
	}
	start.add("starting the command's process", stubFork)
	start.add("new session", unix.SYS_SETSID)
	if c.TTY {
		start.add("controlling terminal", unix.SYS_IOCTL, 0, unix.TIOCSCTTY, 0)
	}
	if err := stubSetup(start, c); err != nil {
		return nil, nil, err
	}
	stubSeccomp(start, c)
	addStubExec(start, c, path)
	return join, rest, nil
}

// execFailure turns an exec stage's report into the agent's ExecError.
func execFailure(f *stageFailure) error {
	return &agent.ExecError{Kind: f.kind(), Errno: f.Errno, Msg: f.Msg}
}

// execProc is a command Exec started: a child of this process (child
// subreaper) in the sandbox's PID namespace.
type execProc struct {
	pid   int // in our PID namespace
	nspid int // in the sandbox's
	done  chan struct{}
	ws    unix.WaitStatus
}

func (p *execProc) Pid() int { return p.nspid }

// wait reaps the command and closes done.
func (p *execProc) wait() {
	for {
		_, err := unix.Wait4(p.pid, &p.ws, 0, nil)
		if err != unix.EINTR {
			break
		}
	}
	close(p.done)
}

func (p *execProc) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	forwardSignal(p.pid, sig) // the command leads its own session, as a run's
	return nil
}

// SignalGroup sends sig to the command's process group (it leads its
// own session, so the group is its pid), while the command has not been
// reaped: what a client that went away leaves running is ended with it.
func (p *execProc) SignalGroup(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	return unix.Kill(-p.pid, sig)
}

func (p *execProc) Wait() syscall.WaitStatus {
	<-p.done
	return syscall.WaitStatus(p.ws)
}

// nsPid is the innermost pid of host pid p (its pid in the sandbox's
// PID namespace), from /proc/<p>/status's NSpid line; p when unknown.
func nsPid(p int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/status")
	if err != nil {
		return p
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				if n, err := strconv.Atoi(f[len(f)-1]); err == nil {
					return n
				}
			}
		}
	}
	return p
}

// lookPathIn finds name as execvp in the sandbox would along PATH
// (relative entries from workdir), looking it up below the sandbox's
// root descriptor.
func lookPathIn(rootFd int, name string, env []string, workdir string) (string, error) {
	return searchPath(name, env, func(p string) (found, executable bool) {
		if !path.IsAbs(p) {
			p = path.Join(workdir, p)
		}
		fd, err := openInRoot(rootFd, p, unix.O_PATH)
		if err != nil {
			return false, false
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		if err != nil || st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return false, false
		}
		return true, st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0
	})
}

// ---- the init's side ----

// idleTrimAfter is how long a prepared sandbox's init waits for its
// command before it trims its resident memory (package idletrim).
const idleTrimAfter = 10 * time.Second

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

// becomeIdle is the end of a persistent sandbox's init: it sends the
// supervisor the sandbox's root and the exec template, then replaces
// itself with the stub as the idle PID 1 (pid1IdleScript). It returns
// only on failure.
func (s *initState) becomeIdle() int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "agentkernel: sandbox init: %v\n", err)
		return 125
	}
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	payload, err := json.Marshal(persistReady{Exec: s.cfg.Exec, HomeAdded: s.homeAdded, NetMode: s.netMode})
	if err != nil {
		return fail(err)
	}
	mem, err := unix.MemfdCreate("agentkernel-ready", unix.MFD_CLOEXEC)
	if err != nil {
		return fail(err)
	}
	for b := payload; len(b) > 0; {
		n, err := unix.Write(mem, b)
		if err != nil {
			return fail(err)
		}
		b = b[n:]
	}
	fds := []int{root, mem}
	if s.netDev != nil {
		fds = append(fds, int(s.netDev.Fd()))
	}
	err = unix.Sendmsg(int(s.sock.Fd()), []byte{'R'}, unix.UnixRights(fds...), nil, 0)
	unix.Close(root)
	unix.Close(mem)
	if s.netDev != nil {
		s.netDev.Close()
	}
	if err != nil {
		return fail(err)
	}
	return fail(execIdlePID1(int(s.sock.Fd())))
}

// pid1IdleScript is a persistent sandbox's PID 1 for the rest of its
// life: not dumpable, SIGCHLD ignored (the kernel reaps the orphans it
// inherits), the lockdown (addLockdown), a message on fd 4, the config
// socket, to say so, then a read of it, which returns when the
// supervisor closes it or dies, and exit.
func pid1IdleScript() *stubScript {
	s := &stubScript{dataOff: stubHeader + (8+lockdownRecords)*stubRecSize}
	k := s.add("closing inherited descriptors", unix.SYS_CLOSE_RANGE, fdErr+1, ^uint64(0), 0)
	s.recs[k].flags |= stubIgnore
	s.add("not dumpable", unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	s.add("naming", unix.SYS_PRCTL, unix.PR_SET_NAME, s.cstr("agentkernel-ini"), 0, 0, 0)
	s.add("ignoring SIGCHLD", unix.SYS_RT_SIGACTION, int(unix.SIGCHLD), s.bytes(u64s(1, 0, 0, 0)), 0, 8)
	addLockdown(s)
	// The supervisor serves nothing before PID 1 holds nothing.
	s.add("reporting locked down", unix.SYS_WRITE, fdErr, uint64(stubBase), 1)
	k = s.add("waiting", unix.SYS_READ, fdErr, s.bytes(make([]byte, 8)), 8)
	s.recs[k].flags |= stubIgnore
	s.add("exiting", unix.SYS_EXIT_GROUP, 0)
	return s
}

// execIdlePID1 replaces this process with the stub running
// pid1IdleScript, the script on fd 3 and sock (the config socket) on
// fd 4. It returns only on failure.
func execIdlePID1(sock int) error {
	b, err := pid1IdleScript().encode()
	if err != nil {
		return err
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return err
	}
	// The script fits the pipe's buffer: nobody reads it before the exec.
	if _, err := unix.Write(p[1], b); err != nil {
		return err
	}
	unix.Close(p[1])
	mem, err := unix.MemfdCreate(argv0Init, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return err
	}
	if _, err := unix.Write(mem, []byte(execStub)); err != nil {
		return err
	}
	_, _ = unix.FcntlInt(uintptr(mem), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE)
	// Out of the way first: the pipe may be fd 4, the socket is fd 3.
	hiPipe, err := unix.FcntlInt(uintptr(p[0]), unix.F_DUPFD_CLOEXEC, 10)
	if err != nil {
		return err
	}
	hiSock, err := unix.FcntlInt(uintptr(sock), unix.F_DUPFD_CLOEXEC, 10)
	if err != nil {
		return err
	}
	if err := unix.Dup3(hiPipe, 3, 0); err != nil {
		return err
	}
	if err := unix.Dup3(hiSock, fdErr, 0); err != nil {
		return err
	}
	return syscall.Exec("/proc/self/fd/"+strconv.Itoa(mem), []string{argv0Init}, []string{})
}

// RemoveCgroups removes the (empty or not) cgroups of the sandbox with
// the given id, for GC after a supervisor was killed.
func (b *Backend) RemoveCgroups(id string) []string {
	var removed []string
	for _, d := range sandboxCgroups(id, b.cgOwner) {
		if removeCgroupDir(d) == nil {
			removed = append(removed, d)
		}
	}
	return removed
}

// Measure reads the sandbox's memory, CPU time and processes from its
// cgroup (cgroupUsage).
func (b *Backend) Measure(id string) (sandbox.Usage, bool) {
	mem, cpu, pids, ok := cgroupUsage(id, b.cgOwner)
	return sandbox.Usage{MemoryBytes: mem, CPUSeconds: cpu, Pids: pids}, ok
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

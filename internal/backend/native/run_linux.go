package native

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/backend/native/idrange"
	"github.com/agentkernel/agentkernel/internal/backend/native/prestart"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/hostidmap"
	"github.com/agentkernel/agentkernel/internal/netproc"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Tunables of the parent side.
const (
	// defaultDiskMB sizes the tmpfs that holds the writable layer.
	defaultDiskMB = 1024
	// termGrace is how long a SIGTERM/SIGINT/SIGHUP forwarded to the
	// command may take to end the sandbox before it is killed outright
	// (a second one kills it at once).
	termGrace = 3 * time.Second
	// defaultNoFile is the open-files limit of the command (capped by the
	// hard limit agentkernel itself has).
	defaultNoFile = 1 << 20
)

// forwarded are the signals agentkernel passes on to the sandboxed command.
var forwarded = []os.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH}

// Run runs spec.Args in a fresh sandbox and tears it down afterwards. See
// doc.go for the stages.
func (b *Backend) Run(ctx context.Context, spec *sandbox.Spec, stdio sandbox.Stdio) (sandbox.Result, error) {
	r := &runState{b: b, spec: spec, id: spec.ID}
	if v, ok := b.early.LoadAndDelete(spec); ok {
		r.early = v.(*earlyCgroup)
		r.id = r.early.id
	}
	if r.id == "" {
		r.id = randomID()
	}
	defer r.cleanup()
	cfg, err := r.buildConfig()
	if err != nil {
		return sandbox.Result{}, err
	}
	if !r.threadable(cfg) {
		prestart.Discard()
		if err := r.makeCgroup(cfg); err != nil {
			return sandbox.Result{}, err
		}
	}
	if cfg.Trace {
		fmt.Fprintf(os.Stderr, "%s parent: config ready\n", monotonic())
	}
	res, err := r.start(ctx, cfg, stdio)
	if rep, nerr := r.stopNetwork(); err == nil {
		res.NetworkDenials, res.NetworkSummary = rep.Denials, rep.Summary
		res.SecretInjections = rep.Injections
		if nerr != nil {
			r.warn("network: " + nerr.Error())
		}
	}
	return res, err
}

// runState is one Run's host-side bookkeeping.
type runState struct {
	b    *Backend
	spec *sandbox.Spec
	id   string

	runDir string   // DataDir/runs/<id>, only when something lives on disk
	lock   *os.File // flock'ed while the run is alive (GC checks it)
	cg     *cgroup
	// persistent: Start, not Run (no command yet; persist_linux.go).
	persistent bool
	// prepared: Prepare, not Run (the command comes later; prepare_linux.go).
	prepared bool
	trace    bool
	// warnings of a prepared sandbox, told when its command comes
	// (Prepared.Warnings): whoever prepared it is not who runs it.
	warnings []string
	// early is the cgroup Anticipate started for this run, until
	// makeCgroup takes it; cgTasks its open v1 tasks files, until the
	// exec stage has them.
	early   *earlyCgroup
	cgTasks []*os.File
	// ids is an ephemeral sandbox's block of host ids, held until the
	// sandbox is gone; idBase a persistent sandbox's reserved block.
	ids    *idrange.Lease
	idBase uint32
	// subs are a rootless caller's subordinate ids, when cfg.SubIDs.
	subs subIDs
	// net is the sandbox's network helper, once the network stage has
	// started it (startNetwork).
	netMu sync.Mutex
	net   netproc.Helper
	// netHelper is agentkernel-full's path (findNetHelper).
	netHelper string
	// netNS is, in proxy mode with published ports, the handle on the
	// sandbox's network namespace they are dialled through (proxyDial),
	// under netMu.
	netNS *nsHandle
}

// earlyCgroup is a cgroup being made for a Run that has not started yet.
type earlyCgroup struct {
	id    string
	done  chan struct{}
	cg    *cgroup
	err   error
	tasks []*os.File // v1: opened for the exec stage (cgroup.openTasks)
}

// Anticipate starts making spec's cgroup while the Manager prepares its
// root filesystem: the sandbox's thread waits for it otherwise
// (docs/perf-log.md). Only where Run will make one: as root, with limits.
func (b *Backend) Anticipate(spec *sandbox.Spec) (forget func()) {
	res := spec.Resources
	if os.Geteuid() != 0 || res.MemoryMB <= 0 && res.PIDs <= 0 && res.CPUPercent <= 0 {
		return func() {}
	}
	if prestart.Pending() {
		// Run makes it while it waits for the prestarted thread
		// (launchThread): a goroutine now would compete for the CPUs
		// with the thread being made and with this one.
		return func() {}
	}
	e := &earlyCgroup{id: spec.ID, done: make(chan struct{})}
	if e.id == "" {
		e.id = randomID()
	}
	b.early.Store(spec, e)
	go func() {
		defer close(e.done)
		e.cg, e.err = newCgroup(cgroupName(e.id, b.cgOwner), res, false, false)
		if e.err == nil && !e.cg.v2 {
			e.tasks, _ = e.cg.openTasks() // else the thread opens them
		}
	}()
	return func() {
		if _, ok := b.early.LoadAndDelete(spec); ok {
			e.discard()
		}
	}
}

// discard removes the cgroup once it is made.
func (e *earlyCgroup) discard() {
	<-e.done
	closeFiles(e.tasks)
	if e.cg != nil {
		_ = e.cg.destroy()
	}
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// warn tells the caller about a weaker sandbox than asked for (no
// cgroup limits): at once, or with the command for a prepared sandbox.
func (r *runState) warn(msg string) {
	if r.prepared {
		r.warnings = append(r.warnings, msg)
		return
	}
	r.b.opts.Warn(msg)
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// buildConfig turns the Spec into the init's configuration, creating the
// on-disk run directory (--keep) and the cgroup (limits) when needed.
func (r *runState) buildConfig() (*initConfig, error) {
	spec := r.spec
	rootless := os.Geteuid() != 0
	cfg := &initConfig{
		ID:           r.id,
		Hostname:     spec.Hostname,
		Network:      spec.Network.Mode.Egress(),
		Rootless:     rootless,
		Layers:       spec.Rootfs.Layers,
		Host:         spec.Rootfs.Host,
		DiskMB:       spec.Resources.DiskMB,
		ReadOnlyRoot: spec.ReadOnlyRoot,
		Mounts:       spec.Mounts,
	}
	cfg.GoExecStage = r.b.goExecStage
	if cfg.Network {
		r.findNetHelper()
	}
	if os.Getenv("AGENTKERNEL_TRACE_STAGES") != "" {
		cfg.Trace, r.trace = true, true
		fmt.Fprintf(os.Stderr, "%s parent: building config\n", monotonic())
	}
	if cfg.Hostname == "" {
		cfg.Hostname = "sandbox"
	}
	if cfg.DiskMB <= 0 {
		cfg.DiskMB = defaultDiskMB
	}
	if !cfg.Host && len(cfg.Layers) == 0 {
		return nil, errors.New("image has no layers")
	}
	for _, m := range spec.Mounts {
		if !filepath.IsAbs(m.Dest) || (m.Kind != sandbox.MountTmpfs && !filepath.IsAbs(m.Source)) {
			return nil, fmt.Errorf("mount %s:%s: paths must be absolute", m.Source, m.Dest)
		}
		if m.Create {
			// A cache (run --cache): made on first use, the caller's.
			if err := os.MkdirAll(m.Source, 0o700); err != nil {
				return nil, fmt.Errorf("cache %s: %w", m.Source, err)
			}
		}
		if m.Kind != sandbox.MountTmpfs && (m.Source == "/proc" || strings.HasPrefix(m.Source, "/proc/")) {
			return nil, fmt.Errorf("mount %s: host /proc cannot be mounted into a sandbox", m.Source)
		}
	}
	switch {
	case rootless:
		// The init's user namespace maps the caller to root; there is
		// nothing else to map.
	case spec.Security.HostUserNS:
		r.b.opts.Warn("--userns=host: root in the sandbox is root on the host")
	default:
		cfg.NestUserNS = true
		base := r.idBase
		if base == 0 {
			l, err := idrange.Default().Acquire()
			if err != nil {
				return nil, fmt.Errorf("allocating the sandbox's host uid range: %w", err)
			}
			r.ids, base = l, l.Base
		}
		cfg.RootUID, cfg.RootGID = int(base), int(base)
		cfg.OwnerUID, cfg.OwnerGID = hostidmap.InvokingUser()
	}

	args := spec.Args
	if len(args) == 0 {
		args = append(append([]string{}, spec.Rootfs.Config.Entrypoint...), spec.Rootfs.Config.Cmd...)
	}
	if len(args) == 0 && (r.persistent || r.prepared) {
		args = []string{"/bin/sh"} // a template only: each exec names its own
	}
	if len(args) == 0 {
		return nil, errors.New("no command given and the image defines none")
	}
	wd := spec.Workdir
	if wd == "" {
		wd = spec.Rootfs.Config.WorkingDir
	}
	if wd == "" {
		wd = "/"
	}
	user := spec.User
	if user == "" {
		user = spec.Rootfs.Config.User
	}
	var nofile unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile)
	cfg.Exec = execConfig{
		Args:       args,
		Env:        mergeEnv(hostImageEnv(spec.Rootfs.Config.Env, spec.Rootfs.Host), spec.Env, spec.TTY),
		Workdir:    wd,
		User:       user,
		TTY:        spec.TTY,
		Caps:       spec.Security.Capabilities,
		Seccomp:    string(spec.Security.Seccomp),
		NoNewPrivs: true,
		Landlock:   spec.Security.Landlock,
		NoFile:     min(nofile.Max, defaultNoFile),
		// An unprivileged caller's user namespace has setgroups denied,
		// unless newgidmap wrote its map.
		NoSetgroups: rootless,
	}
	if rootless {
		if subs, ok := lookupSubIDs(); ok {
			r.subs, cfg.SubIDs, cfg.Exec.NoSetgroups = subs, true, false
		}
	}

	if err := r.checkLandlock(); err != nil {
		return nil, err
	}
	if err := r.secretConfig(cfg); err != nil {
		return nil, err
	}

	// More than execve can take is refused here, at once, rather than
	// after it travelled through every stage (seconds for tens of MiB).
	if err := checkArgMax(cfg.Exec.Args, cfg.Exec.Env); err != nil {
		return nil, err
	}
	// The stub's script area holds about 1 MiB: a larger argv and
	// environment (execve allows more) goes through the Go exec stage.
	if argBytes(cfg.Exec.Args)+argBytes(cfg.Exec.Env) > stubArgBudget {
		cfg.GoExecStage = true
	}

	// A writable idmapped host directory lets the sandbox's root write
	// files the host sees as root's: the filter then also refuses
	// setuid/setgid bits and xattrs (doc.go, "Workspace ownership").
	// Rootless, the same holds for the caller's own uid: a set-id file of
	// the caller planted in the workspace runs as the caller for whoever
	// else executes it.
	for _, m := range spec.Mounts {
		if m.Kind == sandbox.MountBind && !m.ReadOnly && !spec.Security.HostUserNS {
			cfg.Exec.ExtraSeccomp = true
		}
	}
	if spec.Keep {
		if err := r.makeRunDir(cfg); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// makeCgroup creates the cgroup when the spec sets a limit. A sandbox
// built on a thread has it made while the thread creates namespaces.
func (r *runState) makeCgroup(cfg *initConfig) error {
	res := r.spec.Resources
	var cg *cgroup
	var err error
	switch e := r.early; {
	case e != nil && !cfg.Rootless:
		r.early = nil
		<-e.done
		cg, err, r.cgTasks = e.cg, e.err, e.tasks
	case res.MemoryMB <= 0 && res.PIDs <= 0 && res.CPUPercent <= 0:
		return nil
	default:
		if r.persistent && res.PIDs > 0 {
			// The armed exec stage waits in the cgroup
			// (persist_armed_linux.go): it is not one of the sandbox's.
			res.PIDs++
		}
		cg, err = newCgroup(cgroupName(r.id, r.b.cgOwner), res, cfg.Rootless, r.persistent)
	}
	switch {
	case err == nil:
		r.cg = cg
		cfg.Cgroups = cg.procsDirs()
	case errors.Is(err, errNoCgroups):
		if err := r.degrade(config.DegradeCgroups, err); err != nil {
			return err
		}
	default:
		return err
	}
	return nil
}

// makeRunDir creates DataDir/runs/<id> with upper/ and work/ for --keep,
// and a flock'ed lock file that tells GC the run is alive.
func (r *runState) makeRunDir(cfg *initConfig) error {
	if r.b.opts.DataDir == "" {
		return errors.New("--keep needs a data directory")
	}
	dir := filepath.Join(r.b.opts.DataDir, "runs", r.id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	r.runDir = dir
	lock, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	r.lock = lock
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fmt.Errorf("lock %s: %w", dir, err)
	}
	for _, d := range []string{"upper", "work"} {
		p := filepath.Join(dir, d)
		if err := os.Mkdir(p, 0o755); err != nil {
			return err
		}
		// The sandbox's root must own its writable layer.
		if err := os.Lchown(p, cfg.RootUID, cfg.RootGID); err != nil && !cfg.Rootless {
			return err
		}
	}
	// The runs directory is 0700: the overlay is mounted by the init as the
	// mounter, so the sandbox itself never walks this path.
	cfg.Upper = dir
	return nil
}

func (r *runState) cleanup() {
	if r.early != nil { // never taken: the run failed before its cgroup
		r.early.discard()
	}
	closeFiles(r.cgTasks) // the exec stage has them, or never came
	if r.cg != nil {
		if err := r.cg.destroy(); err != nil {
			r.b.log.Warn("removing cgroup", "err", err)
		}
		if os.Getenv("AGENTKERNEL_TRACE_STAGES") != "" {
			fmt.Fprintf(os.Stderr, "%s parent: cgroup removed\n", monotonic())
		}
	}
	if r.runDir != "" {
		if r.spec.Keep {
			_ = os.WriteFile(filepath.Join(r.runDir, keptFile), nil, 0o600)
		} else {
			_ = os.RemoveAll(r.runDir)
		}
	}
	if r.lock != nil {
		r.lock.Close()
	}
	r.ids.Release()
}

// start launches the init, waits for it, forwards signals and enforces
// the timeout.
func (r *runState) start(ctx context.Context, cfg *initConfig, stdio sandbox.Stdio) (sandbox.Result, error) {
	var tty *ttyState
	var io3 *stdioFiles
	var err error
	switch {
	case cfg.Exec.TTY && r.sandboxPTY(cfg):
		// The terminal comes from the sandbox's own devpts once its root
		// is built (openCommandPTY: the thread's, or the re-executed
		// init's), so that its /dev/pts/N exists inside; until then the
		// exec stage holds /dev/null.
		cfg.Exec.SandboxPTY = true
		tty = userTerminal(stdio)
		if tty.inFile != nil {
			if ws, err := unix.IoctlGetWinsize(int(tty.inFile.Fd()), unix.TIOCGWINSZ); err == nil {
				cfg.Exec.Rows, cfg.Exec.Cols = ws.Row, ws.Col
			}
		}
		defer tty.restore()
		if io3, err = newStdioFiles(sandbox.Stdio{}); err != nil {
			return sandbox.Result{}, err
		}
	case cfg.Exec.TTY:
		tty, err = openTTY(stdio)
		if err != nil {
			return sandbox.Result{}, err
		}
		defer tty.restore()
		io3 = &stdioFiles{child: [3]*os.File{tty.slave, tty.slave, tty.slave}}
	default:
		io3, err = newStdioFiles(stdio)
		if err != nil {
			return sandbox.Result{}, err
		}
	}
	defer io3.closeChild()
	// Signals are caught from before the command starts: a SIGTERM meant
	// for the command must reach it (wait forwards what came meanwhile),
	// not kill agentkernel by default. A thread-built sandbox can start
	// its command before launchThread returns; launchThread catches them
	// while the thread builds (signal.Notify makes round trips to the
	// runtime's signal thread) and before it lets the
	// command start. Until then a signal ends agentkernel as it would
	// have during its start-up, and the unstarted sandbox with it.
	sigCh := make(chan os.Signal, 8)
	catch := func() { signal.Notify(sigCh, forwarded...) }
	// signal.Stop waits until Go's signal-forwarding goroutine is idle,
	// at the end of every run: it need not delay the result.
	// A signal that still arrives meanwhile goes to sigCh, which nobody
	// reads any more, instead of the default action.
	defer func() { go signal.Stop(sigCh) }()
	var l *launched
	var tl *threadLaunch
	if r.threadable(cfg) {
		if tl, err = r.launchThread(cfg, io3, catch); err == nil {
			l = tl.l
		}
	} else {
		catch()
		l, err = r.launch(cfg, io3)
	}
	if err != nil {
		return sandbox.Result{}, err
	}
	defer l.sock.Close()
	io3.start()
	switch {
	case tty == nil || !cfg.Exec.SandboxPTY:
	case tl != nil:
		// Sent before the command may start, or nil when the build failed
		// (wait reports why).
		tty.master = <-tl.pty
		tty.inheritSize()
	default:
		// The re-executed init sends it on the config socket, before
		// the command may start; nil when the build failed.
		if l.netDone != nil {
			<-l.netDone // the network stage's message comes first
		}
		tty.master = recvCommandPTY(l.sock)
		tty.inheritSize()
	}
	if tty != nil && tty.master != nil {
		tty.slave.Close()
		tty.copy()
	}
	return r.wait(ctx, l, sigCh, tty, io3.wait)
}

// launched is an init that was forked and is booting.
type launched struct {
	pid    int
	sock   *os.File // our end of the config socket
	waitCh chan initExit
	errCh  chan []byte // what the init and exec stage reported on fd 4
	// result, when set, delivers the command's status as soon as the
	// init reports it, before the sandbox is torn down (prepared runs;
	// closed if the init ends without one).
	result chan syscall.WaitStatus
	// reaped, when set, runs once the init has been reaped; a wait that
	// returns early (on result) leaves it to a goroutine.
	reaped func()
	// direct: the sandbox was built on a thread (thread_linux.go), pid
	// is the command's own process, and waitCh delivers its status once
	// initPid, the sandbox's PID 1, is gone too.
	direct  bool
	initPid int
	// netDone, when set, is closed once the init's network stage has
	// handed over the sandbox's network device (awaitNetwork).
	netDone chan struct{}
}

type initExit struct {
	ws  syscall.WaitStatus
	err error
}

// launch forks the init with io3's child ends as its stdio, queues its
// config and, while it boots, moves it into its v1 cgroup and sends the
// seccomp filter.
func (r *runState) launch(cfg *initConfig, io3 *stdioFiles) (*launched, error) {
	if cfg.Trace {
		fmt.Fprintf(os.Stderr, "%s parent: config built\n", monotonic())
	}
	payload, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	// fd 3: a SOCK_SEQPACKET pair — the config goes in before the init
	// even starts (no round trip), the result comes back at the end.
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	parentSock := os.NewFile(uintptr(sp[0]), "config")
	childSock := os.NewFile(uintptr(sp[1]), "config-child")
	defer childSock.Close()
	if err := sendConfig(sp[0], payload); err != nil {
		parentSock.Close()
		return nil, fmt.Errorf("sending config: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		parentSock.Close()
		return nil, err
	}
	defer errW.Close()

	sys := &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
		Pdeathsig:  unix.SIGKILL,
		// Its own session: a terminal's ^C reaches agentkernel only,
		// which forwards it once.
		Setsid: true,
	}
	if cfg.Rootless {
		sys.Cloneflags |= unix.CLONE_NEWUSER
		if !cfg.SubIDs { // else mapped below, by newuidmap and newgidmap
			sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
			sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		}
	}
	if cfg.Trace {
		fmt.Fprintf(os.Stderr, "%s parent: stdio ready\n", monotonic())
	}
	// syscall.ForkExec rather than os/exec: no pidfd probe (a throw-away
	// child per process), no goroutines when stdio are files.
	if r.cg != nil {
		if fd := r.cg.openDir(); fd >= 0 {
			// v2: clone straight into the cgroup, nothing to migrate.
			defer unix.Close(fd)
			sys.UseCgroupFD, sys.CgroupFD = true, fd
		}
	}
	if cfg.Trace {
		fmt.Fprintf(os.Stderr, "%s parent: forking init\n", monotonic())
	}
	l := &launched{sock: parentSock, waitCh: make(chan initExit, 1), errCh: make(chan []byte, 1)}
	var mapsW *os.File // SubIDs: closed once the init's maps are written
	fork := func() error {
		files := []uintptr{io3.child[0].Fd(), io3.child[1].Fd(), io3.child[2].Fd(), childSock.Fd(), errW.Fd()}
		if cfg.SubIDs {
			pid, w, err := forkUnmapped(files, sys)
			l.pid, mapsW = pid, w
			return err
		}
		pid, err := syscall.ForkExec("/proc/self/exe", []string{argv0Init}, &syscall.ProcAttr{
			Env:   []string{},
			Files: files,
			Sys:   sys,
		})
		l.pid = pid
		return err
	}
	reap := func() {
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(l.pid, &ws, 0, nil)
			if err != syscall.EINTR {
				l.waitCh <- initExit{ws, err}
				return
			}
		}
	}
	if r.persistent {
		// The supervisor locked its thread for good (supervisor.Serve).
		err = fork()
		if err == nil {
			go reap()
		}
	} else {
		// Pdeathsig follows the thread that forks, not the process, and
		// a thread-built sandbox (thread_linux.go) ends the thread it
		// locked: fork from a thread of our own that stays locked until
		// the init is reaped, so that no other sandbox's end takes it
		// down.
		forked := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			err := fork()
			forked <- err
			if err == nil {
				reap()
			}
			if err != nil || unix.Gettid() == unix.Getpid() {
				runtime.UnlockOSThread() // no child, or the main thread (never ended)
			}
		}()
		err = <-forked
	}
	io3.closeChild()
	if err != nil {
		parentSock.Close()
		errR.Close()
		return nil, fmt.Errorf("starting sandbox init: %w", err)
	}
	pid := l.pid
	if cfg.SubIDs {
		// The init waits for its maps before it execs (forkUnmapped).
		defer mapsW.Close()
		msg := []byte{'M'}
		if err := r.subs.mapSubIDs(pid); err != nil {
			r.warn("subordinate ids not mapped (" + err.Error() + "); the sandbox maps your uid only")
			if err := mapOwnID(pid); err != nil {
				_ = unix.Kill(pid, unix.SIGKILL)
				parentSock.Close()
				errR.Close()
				return nil, fmt.Errorf("mapping the sandbox's user namespace: %w", err)
			}
			msg[0] = 'S'
		}
		if _, err := parentSock.Write(msg); err != nil {
			_ = unix.Kill(pid, unix.SIGKILL)
			parentSock.Close()
			errR.Close()
			return nil, err
		}
		mapsW.Close() // the init execs agentkernel now
	}
	// Compile the seccomp filter while the init boots, and send it as the
	// second config message; the init passes it on to the exec stage.
	// The second config message says "you are in your cgroup, here is
	// the filter": the v1 cgroup migration and the filter are done here
	// while the init boots.
	go func() {
		var m []byte
		if r.cg != nil {
			if err := r.cg.join(pid, sys.UseCgroupFD); err != nil {
				m = append([]byte{'E'}, err.Error()...)
			}
		}
		if m == nil {
			m = r.filterMessage(&cfg.Exec)
		}
		if cfg.Trace {
			fmt.Fprintf(os.Stderr, "%s parent: filter compiled\n", monotonic())
		}
		_, _ = parentSock.Write(m)
	}()
	go func() { b, _ := io.ReadAll(errR); errR.Close(); l.errCh <- b }()
	if cfg.Network && !r.persistent && !r.prepared {
		l.netDone = make(chan struct{})
		go r.awaitNetwork(parentSock, l.netDone, pid)
	}
	return l, nil
}

// wait waits for the launched init to end, forwarding sigCh's signals,
// enforcing the timeout and ctx, and returns the command's result.
// drained waits until the command's output has been copied out.
func (r *runState) wait(ctx context.Context, l *launched, sigCh <-chan os.Signal, tty *ttyState, drained func()) (res sandbox.Result, err error) {
	pid := l.pid
	early := false
	defer func() {
		switch {
		case l.reaped == nil:
		case early:
			// The command's status and output are in: the teardown of
			// the sandbox (unmounts, namespaces) need not delay the
			// caller.
			go func() {
				<-l.waitCh
				<-l.errCh
				l.reaped()
			}()
		default:
			l.reaped()
		}
	}()
	resultCh := l.result
	var earlySt syscall.WaitStatus
	var timeout <-chan time.Time
	if d := r.spec.Resources.Timeout; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	var grace <-chan time.Time
	killed, termSig := false, 0
	kill := func() {
		if !killed {
			killed = true
			_ = unix.Kill(pid, unix.SIGKILL)
			if l.initPid > 0 {
				_ = unix.Kill(l.initPid, unix.SIGKILL)
			}
			if r.cg != nil {
				r.cg.kill()
			}
		}
	}
	done := ctx.Done()
	var ex initExit
wait:
	for {
		select {
		case ex = <-l.waitCh:
			break wait
		case st, ok := <-resultCh:
			if !ok {
				resultCh = nil
				continue
			}
			early, earlySt = true, st
			break wait
		case s := <-sigCh:
			sig := s.(syscall.Signal)
			if sig == unix.SIGWINCH && tty != nil {
				tty.resize()
				continue
			}
			deliver(l, tty, sig)
			if sig == unix.SIGTERM || sig == unix.SIGINT || sig == unix.SIGHUP {
				if grace != nil {
					// A second one: the command had its chance.
					kill()
					continue
				}
				termSig = int(sig)
				grace = time.After(termGrace)
			}
		case <-grace:
			kill()
		case <-timeout:
			res.TimedOut = true
			kill()
		case <-done:
			res.TimedOut = true
			done = nil
			kill()
		}
	}
	if tty != nil {
		tty.wait()
	}
	drained()
	if r.trace {
		fmt.Fprintf(os.Stderr, "%s parent: init exited\n", monotonic())
	}
	var st syscall.WaitStatus
	ok := early
	if early {
		st = earlySt
	} else {
		msg := <-l.errCh
		if len(msg) > 0 {
			if e := parseInitError(msg); e != nil && !res.TimedOut {
				return sandbox.Result{}, e
			}
		}
		switch {
		case l.direct:
			st, ok = ex.ws, true
		case l.result != nil:
			st, ok = <-l.result
		default:
			if l.netDone != nil {
				<-l.netDone // the network stage's message comes before the result
			}
			st, ok = readResult(l.sock)
		}
	}
	if !ok {
		if !killed && ex.ws.Exited() {
			// The init ended on its own without reporting the
			// command's status: it failed, and its exit code is not
			// the command's.
			return sandbox.Result{}, fmt.Errorf("the sandbox init exited unexpectedly (status %d) before the command finished", ex.ws.ExitStatus())
		}
		st = ex.ws
	}
	switch {
	case st.Signaled():
		res.Signal = int(st.Signal())
		res.ExitCode = 128 + res.Signal
	default:
		res.ExitCode = st.ExitStatus()
	}
	if r.cg != nil && r.spec.Resources.MemoryMB > 0 {
		res.OOMKills, res.MemoryMB = r.cg.oomKills(), r.spec.Resources.MemoryMB
	}
	if killed && termSig != 0 && !res.TimedOut {
		// The command outlived the grace period after our SIGTERM/SIGINT.
		res.Signal, res.ExitCode = termSig, 128+termSig
	}
	if r.spec.Keep && r.runDir != "" {
		res.KeptAt = filepath.Join(r.runDir, "upper")
	}
	return res, nil
}

// deliver passes a signal agentkernel received on to the sandbox as a
// terminal would: the keyboard's signals (SIGINT, SIGQUIT) go to the whole
// foreground job, so that a shell waiting for its child ends with it
// instead of waiting on; any other signal goes to the command alone.
// With a pseudo-terminal the terminal's own interrupt character is typed
// into it, and its line discipline signals whatever job the sandbox put
// in the foreground (or passes the character on, in raw mode, as a
// terminal would). Without one, the command is its session's and its
// process group's leader (the exec stage calls setsid), so its group is
// the job: signalled from here when the command is our child (its pid
// cannot be reused before we reap it), by the init when the init is PID 1
// (forwardSignal).
func deliver(l *launched, tty *ttyState, sig syscall.Signal) {
	if sig == unix.SIGINT || sig == unix.SIGQUIT {
		if tty != nil && tty.typeSignal(sig) {
			return
		}
		if l.direct {
			forwardSignal(l.pid, sig)
			return
		}
	}
	_ = unix.Kill(l.pid, sig)
}

// typeSignal types the pty's character for sig (VINTR, VQUIT) when its
// line discipline turns characters into signals (ISIG), and reports
// whether it did.
func (t *ttyState) typeSignal(sig syscall.Signal) bool {
	rc, err := t.master.SyscallConn()
	if err != nil {
		return false
	}
	var c byte
	_ = rc.Control(func(fd uintptr) {
		// On Linux a pty master's termios requests are the slave's.
		tio, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
		if err != nil || tio.Lflag&unix.ISIG == 0 {
			return
		}
		switch sig {
		case unix.SIGINT:
			c = tio.Cc[unix.VINTR]
		case unix.SIGQUIT:
			c = tio.Cc[unix.VQUIT]
		}
	})
	if c == 0 { // _POSIX_VDISABLE
		return false
	}
	_, err = t.master.Write([]byte{c})
	return err == nil
}

// filterMessage is 'F' and the raw seccomp program, or 'E' and why it
// could not be built. Compiled programs are cached under
// DataDir/cache/seccomp, keyed by profile, capabilities, the idmap guards
// and this binary's identity: building docker's profile in a fresh
// process costs far more than reading it back (BenchmarkCompileSeccomp).
func (r *runState) filterMessage(e *execConfig) []byte {
	if e.Seccomp == "" || e.Seccomp == string(sandbox.SeccompUnconfined) {
		return []byte{'F'}
	}
	var cache string
	if r.b.opts.DataDir != "" {
		if id, err := exeIdentity(); err == nil {
			caps := append([]string(nil), e.Caps...)
			sort.Strings(caps)
			sum := sha256.Sum256([]byte(fmt.Sprintf("%s|%s|%v|%s|%s", e.Seccomp, strings.Join(caps, ","), e.ExtraSeccomp, runtime.GOARCH, id)))
			cache = filepath.Join(r.b.opts.DataDir, "cache", "seccomp", exePrefix(id)+hex.EncodeToString(sum[:16])+".bpf")
			if b, err := os.ReadFile(cache); err == nil && len(b) > 0 && len(b)%8 == 0 {
				return append([]byte{'F'}, b...)
			}
		}
	}
	prog, err := compileSeccomp(e.Seccomp, e.Caps, e.ExtraSeccomp)
	if err != nil {
		return append([]byte{'E'}, err.Error()...)
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&prog[0])), 8*len(prog))
	if cache != "" {
		// Best effort, atomic: a torn file is never read back.
		if err := os.MkdirAll(filepath.Dir(cache), 0o700); err == nil {
			tmp := cache + "." + randomID()
			if os.WriteFile(tmp, raw, 0o600) == nil {
				if os.Rename(tmp, cache) != nil {
					os.Remove(tmp)
				}
			}
			pruneSeccompCache(filepath.Dir(cache), filepath.Base(cache)[:len(exePrefix(""))])
		}
	}
	return append([]byte{'F'}, raw...)
}

// exePrefix starts the cache file names of one build of the binary.
func exePrefix(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:4]) + "-"
}

// pruneSeccompCache removes what other builds of agentkernel cached (a
// new program is compiled only after an upgrade or a new profile, so this
// runs rarely) and temporary files a killed run left behind.
func pruneSeccompCache(dir, prefix string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		switch {
		case !strings.HasPrefix(name, prefix):
		case !strings.HasSuffix(name, ".bpf"):
			// A temporary file: only once surely abandoned.
			if info, err := e.Info(); err != nil || time.Since(info.ModTime()) < time.Minute {
				continue
			}
		default:
			continue
		}
		_ = os.Remove(filepath.Join(dir, name))
	}
}

// exeIdentity names this build of the binary (device, inode, size, mtime
// of /proc/self/exe): a rebuilt agentkernel never reads an old cache.
func exeIdentity() (string, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d:%d:%d.%d", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec), nil
}

// monotonic is CLOCK_MONOTONIC in milliseconds, for stage traces that
// line up across processes.
func monotonic() string {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return fmt.Sprintf("%.3f", float64(ts.Nano())/1e6)
}

// readResult reads the wait status the init sends just before it exits.
func readResult(f *os.File) (syscall.WaitStatus, bool) {
	var buf [32]byte
	n, _, err := unix.Recvfrom(int(f.Fd()), buf[:], unix.MSG_DONTWAIT)
	if err != nil || n == 0 {
		return 0, false
	}
	v, err := strconv.Atoi(string(buf[:n]))
	if err != nil {
		return 0, false
	}
	return syscall.WaitStatus(v), true
}

// parseInitError turns the init's, the thread's or the exec stage's
// failure report (stageFailure) into an error.
func parseInitError(msg []byte) error {
	f, err := decodeStageFailure(msg)
	if err != nil {
		return err
	}
	if f.Exec {
		if sentinel := sandbox.ExecErrno(f.Errno); sentinel != nil {
			return fmt.Errorf("%s: %w", f.Msg, sentinel)
		}
	}
	return errors.New(f.Msg)
}

// mergeEnv is the image's environment overlaid with the spec's, with PATH
// (and TERM for a tty) defaulted.
func mergeEnv(image, spec []string, tty bool) []string {
	out := make([]string, 0, len(image)+len(spec)+2)
	idx := map[string]int{}
	add := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			return
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	for _, kv := range image {
		add(kv)
	}
	for _, kv := range spec {
		add(kv)
	}
	if _, ok := idx["PATH"]; !ok {
		add("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	if _, ok := idx["TERM"]; !ok && tty {
		add("TERM=xterm")
	}
	return out
}

// inlineConfigMax is the largest config sent as one SEQPACKET message; a
// larger one (a huge argv or environment) travels in a memfd whose
// descriptor is passed instead, since a datagram cannot outgrow the
// socket buffer.
const inlineConfigMax = 64 << 10

// sendConfig queues the init's config on the config socket.
func sendConfig(sock int, payload []byte) error {
	if len(payload) <= inlineConfigMax {
		return unix.Send(sock, payload, 0)
	}
	fd, err := unix.MemfdCreate("agentkernel-config", unix.MFD_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for b := payload; len(b) > 0; {
		n, err := unix.Write(fd, b)
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return unix.Sendmsg(sock, []byte{'@'}, unix.UnixRights(fd), nil, 0)
}

// stubArgBudget is how much argv and environment the exec stub's script
// may carry, leaving room in its 1 MiB area for the rest of the script.
const stubArgBudget = 768 << 10

// argBytes is the size of strs as execve counts it (with terminators).
func argBytes(strs []string) int {
	n := 0
	for _, s := range strs {
		n += len(s) + 1
	}
	return n
}

// maxArgStrlen is the kernel's MAX_ARG_STRLEN: the longest one argument
// or environment string execve takes (32 pages).
const maxArgStrlen = 32 * 4096

// checkArgMax refuses (E2BIG, "cannot invoke") an argv and environment
// that execve would refuse in the sandbox: a string longer than
// MAX_ARG_STRLEN, or strings and pointers together over the kernel's
// limit for this process's stack rlimit (a quarter of it, at most 3/4 of
// 8 MiB, at least 128 KiB), which the command inherits.
func checkArgMax(args, env []string) error {
	limit := uint64(6 << 20)
	var st unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_STACK, &st) == nil && st.Cur != unix.RLIM_INFINITY {
		limit = min(limit, st.Cur/4)
	}
	limit = max(limit, maxArgStrlen)
	var total uint64
	for _, list := range [][]string{args, env} {
		for _, s := range list {
			if len(s)+1 > maxArgStrlen {
				return fmt.Errorf("exec %s: %w: one argument or variable is %d bytes, over the kernel's %d: %w",
					args[0], unix.E2BIG, len(s), maxArgStrlen, sandbox.ErrCannotInvoke)
			}
			total += uint64(len(s)) + 1 + 8
		}
		total += 8
	}
	if total > limit {
		return fmt.Errorf("exec %s: %w: %d bytes of arguments and environment, over the kernel's %d: %w",
			args[0], unix.E2BIG, total, limit, sandbox.ErrCannotInvoke)
	}
	return nil
}

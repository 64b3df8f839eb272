package native

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/backend/native/prestart"
)

// An ephemeral run as root builds its sandbox on a thread of agentkernel
// itself instead of in a re-executed init: a second Go runtime start (the
// binary's page faults, every linked package's init, its exit) costs more
// than everything the init does. The thread is locked and never unlocked,
// so it ends, namespaces and all, when its goroutine returns; the rest of
// the process never sees its namespaces or its root.
//
//	thread   unshare mount/PID/net/IPC/UTS namespaces, lo up, fork PID 1
//	         (the assembly stub): for a CLI run, package prestart does
//	         this during agentkernel's start-up, and Run gets the thread
//	         ready; scratch tmpfs; PID 1's script; fork PID 2 (the stub
//	         again) into the cgroup (v2: cloned into it; v1: it moves
//	         itself in first thing, see cgroup.openTasks); overlay root;
//	         move in what PID 1 staged; volumes; pivot_root; the exec
//	         stage's script
//	PID 1    stubInitScript: stages on the scratch space what goes on
//	         the root: proc (only a process inside the namespace can
//	         mount it) with its masked and read-only paths, /dev, /sys,
//	         /tmp, /run; then idles with SIGCHLD ignored, so the kernel
//	         reaps the orphans it inherits
//	PID 2    the exec stage as in the re-executed design: own user and
//	         cgroup namespaces, capabilities, ids, Landlock, seccomp,
//	         execve; a child of agentkernel, which collects its status
//	         directly and forwards signals to it
//
// When the command ends, agentkernel kills PID 1, and the PID namespace's
// teardown kills whatever the command left behind; the waiter removes
// the cgroup meanwhile. The thread stays alive until then: the stubs'
// Pdeathsig follows the thread that forked them. Rootless runs (a
// multi-threaded process cannot enter a new user namespace), persistent
// sandboxes, and architectures without the stub keep the re-executed
// init.

// threadInit is the thread's handle on the sandbox's PID 1.
type threadInit struct {
	pid    int
	sock   *os.File // its fd 3: script in, "proc mounted" out
	errR   *os.File // its {index, errno} report
	script *stubScript
	acked  bool
	// forked is PID 1's process and descriptors: package prestart's,
	// forked during start-up, or startInitStub's. inCgroup: it was cloned
	// into the sandbox's (v2) cgroup; otherwise only the command and what
	// it starts are in the cgroup.
	forked   prestart.Init
	inCgroup bool
	// prebuilt is PID 1's script, built by the caller while it waited
	// for a prestarted thread (threadPrep), or nil: build it here.
	prebuilt *stubScript
	// r and launch are the run and what it shares with the thread;
	// cgroupTaken: the cgroup made meanwhile was received (useCgroup).
	r           *runState
	launch      *threadLaunch
	cgroupTaken bool
}

// threadPrep is what the caller of a run with a prestarted thread works
// out while it waits for that thread, which is still making namespaces
// and forking PID 1 then: which paths of /proc and /sys to mask, where
// the scratch space goes, and PID 1's script. The thread would otherwise
// do it on the run's critical path.
type threadPrep struct {
	scratch string
	script  *stubScript
}

func prepareForThread(cfg *initConfig) *threadPrep {
	scratch, err := scratchDir(cfg)
	if err != nil {
		return nil // the thread reports it
	}
	masks := append(prestart.LookupMasks("/proc/"), prestart.LookupMasks("/sys/")...)
	return &threadPrep{scratch: scratch, script: stubInitScript(scratch, cfg, masks)}
}

// threadLaunch is what the parent and the thread share while it builds.
type threadLaunch struct {
	l      *launched
	io3    *stdioFiles
	filter chan []byte // the seccomp filter message, computed meanwhile
	// early is the same message, published to the thread with the
	// cgroup (the send on cgroup) so that the stub may load the filter
	// first (earlySeccomp). nil for a prepared sandbox, whose exec stage
	// keeps its split scripts (buildStubPrepared).
	early   []byte
	cgroup  chan error // the cgroup made meanwhile (runState.makeCgroup)
	started chan error // the command's process exists, or why not
	// prepared sandboxes: ready is closed once the sandbox waits for its
	// command, which comes on cmd (closed: discarded).
	ready chan struct{}
	cmd   chan threadCmd
	sent  bool // cmd was sent on or closed (guarded by Prepared.mu's used)
	// pty: with Exec.SandboxPTY, the master of the command's terminal,
	// opened in the sandbox's devpts (openCommandPTY); nil when the
	// build failed first. Buffered: the first send wins.
	pty chan *os.File
}

// threadCmd is a prepared sandbox's command: its argv and stdio (the
// thread owns and closes the descriptors).
type threadCmd struct {
	args  []string
	stdio []int
}

// threadable reports whether this run builds its sandbox on a thread.
// AGENTKERNEL_REEXEC_INIT=1 keeps the re-executed init (for comparison).
func (r *runState) threadable(cfg *initConfig) bool {
	return execStub != "" && !cfg.Rootless && !cfg.GoExecStage && !cfg.Persistent &&
		!r.persistent && os.Getenv("AGENTKERNEL_REEXEC_INIT") == ""
}

// launchThread starts building the sandbox on a locked thread and returns
// once its command's process exists (or the build failed before that).
// before, when not nil, runs here while the thread builds, and always
// before the thread may start the command.
func (r *runState) launchThread(cfg *initConfig, io3 *stdioFiles, before func()) (*threadLaunch, error) {
	tl := &threadLaunch{
		l:       &launched{waitCh: make(chan initExit, 1), errCh: make(chan []byte, 1), direct: true},
		io3:     io3,
		filter:  make(chan []byte, 1),
		started: make(chan error, 1),
	}
	if cfg.Exec.SandboxPTY {
		tl.pty = make(chan *os.File, 1)
	}
	if cfg.Deferred {
		tl.ready, tl.cmd = make(chan struct{}), make(chan threadCmd, 1)
		tl.l.result = make(chan syscall.WaitStatus, 1)
	}
	tl.cgroup = make(chan error, 1)
	if cfg.Trace {
		fmt.Fprintf(os.Stderr, "%s parent: taking thread\n", monotonic())
	}
	// While a prestarted thread is still being made (it usually is: it
	// unshares the namespaces and forks PID 1 while agentkernel starts),
	// the work that needs no thread is done here instead of on its
	// critical path: PID 1's script and the cgroup.
	var prep *threadPrep
	var cgErr error
	var filter []byte // the seccomp filter message
	cgMade := false
	if prestart.Pending() {
		prep = prepareForThread(cfg)
		if cfg.Trace {
			fmt.Fprintf(os.Stderr, "%s parent: PID 1's script built\n", monotonic())
		}
		cgErr, cgMade = r.makeCgroup(cfg), true
		if cgErr == nil && r.cg != nil && !r.cg.v2 && r.cgTasks == nil {
			r.cgTasks, _ = r.cg.openTasks() // else the thread opens them
		}
		filter = r.filterMessage(&cfg.Exec)
		if cfg.Trace {
			fmt.Fprintf(os.Stderr, "%s parent: cgroup made\n", monotonic())
		}
	}
	// The prestarted thread goes on with the build as soon as it is
	// made (or at once, if it waits already); meanwhile this goroutine
	// does its share below.
	given := prestart.Give(func(th *prestart.Thread) {
		if cfg.Trace {
			fmt.Fprintf(os.Stderr, "%s thread: prestarted\n", monotonic())
		}
		// th is nil when its namespaces could not be made: the build
		// then starts from scratch on this thread and reports what fails.
		r.buildOnThread(cfg, tl, th, prep)
	})
	if !given {
		go r.buildOnThread(cfg, tl, nil, nil)
	}
	// Meanwhile, here (unless done above): the cgroup and the seccomp
	// filter, both before the thread forks the exec stage, which may
	// load the filter first thing (earlySeccomp). (Goroutines of their
	// own would start later: they wait for another thread to be woken.)
	if !cgMade {
		if cfg.Trace {
			fmt.Fprintf(os.Stderr, "%s cgroup: start\n", monotonic())
		}
		cgErr = r.makeCgroup(cfg)
		if cfg.Trace {
			fmt.Fprintf(os.Stderr, "%s cgroup: made\n", monotonic())
		}
		filter = r.filterMessage(&cfg.Exec)
	}
	if !cfg.Deferred {
		tl.early = filter // published to the thread by the send on cgroup
	}
	tl.cgroup <- cgErr
	if before != nil {
		before()
		if cfg.Trace {
			fmt.Fprintf(os.Stderr, "%s parent: signals caught\n", monotonic())
		}
	}
	// The thread starts the command only once it has the filter (and so
	// only once the signals are caught).
	tl.filter <- filter
	if err := <-tl.started; err != nil {
		return nil, err
	}
	return tl, nil
}

// buildOnThread is the locked thread's life; see the top of this file.
// pre is package prestart's thread when this is it: already locked, in
// its namespaces, with lo up and usually PID 1 forked.
func (r *runState) buildOnThread(cfg *initConfig, tl *threadLaunch, pre *prestart.Thread, prep *threadPrep) {
	io3, l := tl.io3, tl.l
	prestarted := pre != nil
	if !prestarted {
		runtime.LockOSThread() // for good: the thread dies with this goroutine
	}
	if !prestarted && unix.Gettid() == unix.Getpid() {
		// The main thread is never terminated, and /proc/self shows its
		// namespaces: hold it (so that it is not picked) while another
		// thread does the work.
		held := make(chan struct{})
		go func() {
			defer close(held)
			r.buildOnThread(cfg, tl, nil, nil)
		}()
		<-held
		runtime.UnlockOSThread()
		return
	}
	t := &threadInit{r: r, launch: tl}
	if prestarted {
		t.forked = pre.Init
	}
	if prep != nil {
		t.prebuilt = prep.script
	}
	s := &initState{cfg: cfg, usernsFd: -1, ownerNsFd: -1, cgroupFD: -1, proc: "/proc", thread: t, loUp: prestarted,
		stdio: [3]uintptr{io3.child[0].Fd(), io3.child[1].Fd(), io3.child[2].Fd()}, executor: byThread}
	if prestarted && pre.Init.Pid > 0 {
		s.executor = byPrestarted
	}
	if prep != nil {
		s.scratch = prep.scratch // PID 1's script names it
	}
	stopped := func() {
		for _, pid := range []int{s.execPid, t.pid} {
			if pid > 0 {
				_ = unix.Kill(pid, unix.SIGKILL)
				var ws unix.WaitStatus
				_, _ = unix.Wait4(pid, &ws, 0, nil)
			}
		}
	}
	defer s.closeThreadFiles()
	if tl.pty != nil {
		defer func() {
			select {
			case tl.pty <- nil: // the build failed before the terminal was made
			default:
			}
		}()
	}
	defer func() {
		if s.cgroupFD >= 0 {
			unix.Close(s.cgroupFD)
		}
	}()
	// Up to the exec stage's fork, a failure is the caller's error.
	if failed, err := s.runStages(stageConfig, stageExecStart); err != nil || !s.stub {
		if err == nil {
			err = errors.New("starting sandbox: the exec stage did not start")
		} else if perr := t.pid1Failure(failed, err); perr != nil {
			err = perr
		} else {
			err = fmt.Errorf("%s: %w", stages[failed].name, err)
			if failed == stageNamespaces && errors.Is(err, unix.EPERM) {
				err = fmt.Errorf("%w (%s)", err, namespacesHint)
			}
		}
		stopped()
		io3.closeChild()
		if !t.cgroupTaken {
			<-tl.cgroup // r.cg is set (or not) before the caller cleans up
		}
		tl.started <- err
		return
	}
	if cfg.Trace {
		fmt.Fprintf(os.Stderr, "%s thread: init and exec stage forked\n", monotonic())
	}
	io3.closeChild()
	l.pid, l.initPid = s.execPid, t.pid
	done := make(chan struct{})
	outcome := make(chan []byte, 1) // the stages' failure report, nil when the command started
	go func() {
		// The command is our child: its status is the result. Then PID 1
		// goes, and with it everything else in the namespace.
		var ws syscall.WaitStatus
		for {
			if _, err := syscall.Wait4(s.execPid, &ws, 0, nil); err != syscall.EINTR {
				break
			}
		}
		if cfg.Trace {
			fmt.Fprintf(os.Stderr, "%s waiter: command reaped\n", monotonic())
		}
		msg := <-outcome
		if l.result != nil {
			if msg == nil {
				l.result <- ws // before the teardown (prepared sandboxes)
			}
			close(l.result)
		}
		_ = unix.Kill(t.pid, unix.SIGKILL)
		// The cgroup goes here rather than after the caller wakes up.
		// When PID 1 is outside it (v1, or forked during start-up), it is
		// empty already unless the command left orphans: remove it while
		// PID 1 dies.
		ephemeral := r.cg != nil && l.result == nil
		if ephemeral && !t.inCgroup {
			r.cg.tryRemove()
		}
		var iws syscall.WaitStatus
		for {
			if _, err := syscall.Wait4(t.pid, &iws, 0, nil); err != syscall.EINTR {
				break
			}
		}
		if ephemeral {
			_ = r.cg.destroy() // the caller's cleanup reports a failure
			if cfg.Trace {
				fmt.Fprintf(os.Stderr, "%s waiter: cgroup removed\n", monotonic())
			}
		}
		if cfg.Trace {
			fmt.Fprintf(os.Stderr, "%s waiter: init reaped\n", monotonic())
		}
		close(done)
		l.errCh <- msg
		l.waitCh <- initExit{ws: ws}
	}()
	tl.started <- nil

	if failed, err := s.runStages(stageExecStart+1, stageLast); err != nil {
		_ = unix.Kill(s.execPid, unix.SIGKILL)
		if perr := t.pid1Failure(failed, err); perr != nil {
			err = perr
		}
		outcome <- stageReport(failed, err).encode()
		<-done
		return
	}
	outcome <- nil
	<-done
}

// useCgroup is the thread's opening of the cgroup, which the caller
// makes meanwhile (launchThread, or Anticipate). The exec stage starts
// in it: cloned into it on v2, moving itself in first thing on v1
// (cgroup.openTasks). PID 1 stays outside on v1: it only mounts proc and
// waits, and the command never runs under it. The same send publishes
// the seccomp filter the stub may load first (earlySeccomp).
func (s *initState) useCgroup() error {
	t := s.thread
	t.cgroupTaken = true
	if err := <-t.launch.cgroup; err != nil {
		return err
	}
	s.earlyFilter = earlySeccomp(t.launch.early)
	r := t.r
	switch {
	case r.cg == nil:
	case r.cg.v2:
		s.cgroupFD = r.cg.openDir()
	case r.cgTasks != nil: // opened with the cgroup (Anticipate)
		s.cgroupTasks = r.cgTasks
	default:
		var err error
		s.cgroupTasks, err = r.cg.openTasks()
		return err
	}
	return nil
}

// startInitStub forks the sandbox's PID 1 (the first process the thread
// forks after unsharing the PID namespace), unless package prestart did
// during start-up, and hands it its script. One forked here is cloned
// into a v2 cgroup; on v1, and when prestarted, it stays outside: it only
// stages mounts and waits, and the command never runs under it.
func (s *initState) startInitStub() error {
	t := s.thread
	if t.forked.Pid <= 0 {
		sys := &syscall.SysProcAttr{Setsid: true}
		if s.cgroupFD >= 0 {
			sys.UseCgroupFD, sys.CgroupFD = true, s.cgroupFD
		}
		f, err := prestart.ForkStub(argv0Init, sys)
		if err != nil {
			return err
		}
		t.forked, t.inCgroup = f, s.cgroupFD >= 0
	}
	t.pid, t.sock, t.errR = t.forked.Pid, os.NewFile(uintptr(t.forked.Sock), "init"), os.NewFile(uintptr(t.forked.Err), "init-errors")
	return t.sendScript(s.scratch, s.cfg)
}

// sendScript hands PID 1 its whole life (stubInitScript).
func (t *threadInit) sendScript(scratch string, cfg *initConfig) error {
	t.script = t.prebuilt
	if t.script == nil {
		t.script = stubInitScript(scratch, cfg, nil)
	}
	b, err := t.script.encode()
	if err != nil {
		return err
	}
	_, err = t.sock.Write(b)
	return err
}

// procMounted waits until PID 1 has mounted the namespace's proc.
func (t *threadInit) procMounted() error {
	if t.acked {
		return nil
	}
	t.acked = true
	return t.nextReport()
}

// nextReport waits for PID 1's next one-byte report, or says which step
// of its script failed.
func (t *threadInit) nextReport() error {
	var b [1]byte
	if n, err := t.sock.Read(b[:]); n == 1 && err == nil {
		return nil
	}
	var report [16]byte
	n, _ := io.ReadFull(t.errR, report[:])
	return stubError(t.script, report[:n])
}

// pid1Failure is what PID 1's script says failed when forking the exec
// stage into its PID namespace failed with ENOMEM, the kernel's answer
// once the namespace's PID 1 has exited, or when the exec stage ended
// without its report (the kernel kills every process of a PID namespace
// whose PID 1 exits): PID 1's own failure (a mount or device node of its
// script) is the cause. nil where PID 1 reported nothing within a second.
func (t *threadInit) pid1Failure(failed stageID, err error) error {
	if t.errR == nil || t.script == nil {
		return nil
	}
	var sf *stageFailure
	unreported := errors.As(err, &sf) && sf.Errno == 0 && !sf.Exec
	if !(failed == stageExecStart && errors.Is(err, unix.ENOMEM)) && !unreported {
		return nil
	}
	// PID 1 writes its report, or closes the pipe by exiting, only when
	// it fails.
	fds := []unix.PollFd{{Fd: int32(t.errR.Fd()), Events: unix.POLLIN}}
	n, perr := unix.Poll(fds, 1000)
	for perr == unix.EINTR {
		n, perr = unix.Poll(fds, 1000)
	}
	if n <= 0 {
		return nil
	}
	var report [16]byte
	k, _ := io.ReadFull(t.errR, report[:])
	if f := stubError(t.script, report[:k]); f.Errno != 0 {
		return f
	}
	return fmt.Errorf("%s: %w (the sandbox's PID 1 ended while it staged /proc, /dev, /sys and /tmp: %s)", stages[failed].name, err, pid1Hint)
}

// pid1Hint says what a root sandbox's PID 1 needs for its mounts.
const pid1Hint = "as root they need CAP_SYS_ADMIN and CAP_MKNOD, which a container may withhold unless it runs with --cap-add SYS_ADMIN --cap-add MKNOD or --privileged (docs/containers.md); 'agentkernel doctor' says which is missing"

// pid1Locked waits until PID 1 reports that it holds nothing any more
// (stubInitScript's second report); it has long done so by the time the
// command may start.
func (t *threadInit) pid1Locked() error { return t.nextReport() }

// releaseFromThread is releaseExecStage for a thread-built sandbox: the
// filter comes from the parent, and a prepared sandbox's command from
// Prepared.Run.
func (s *initState) releaseFromThread() error {
	tl := s.thread.launch
	m := <-tl.filter
	if s.cfg.Trace {
		fmt.Fprintf(os.Stderr, "%s thread: filter in\n", monotonic())
	}
	if len(m) == 0 || m[0] != 'F' {
		return fmt.Errorf("seccomp filter: %s", m[min(len(m), 1):])
	}
	s.cfg.Exec.Filter = m[1:]
	if s.cfg.Deferred {
		if err := s.setUpPreparedStub(); err != nil {
			return err
		}
		close(tl.ready)
		c, ok := <-tl.cmd
		if !ok {
			return errors.New("prepared sandbox discarded")
		}
		s.cfg.Exec.Args, s.cmdStdio = c.args, c.stdio
	}
	if err := s.thread.pid1Locked(); err != nil {
		return err
	}
	return s.releaseStub()
}

// closeThreadFiles closes what the stages left open; the thread's
// process lives on, unlike a re-executed init.
func (s *initState) closeThreadFiles() {
	for _, f := range append(append([]*os.File{s.thread.sock, s.thread.errR, s.execCfgW, s.stubErrR}, s.cgroupProcs...), s.cgroupTasks...) {
		if f != nil {
			f.Close()
		}
	}
	if s.usernsFd >= 0 {
		unix.Close(s.usernsFd)
	}
	for _, fd := range s.cmdStdio {
		unix.Close(fd)
	}
}

// openCommandPTY makes the command's terminal in the sandbox's own devpts
// (Exec.SandboxPTY), in stage 19 of the thread or of the re-executed
// init: the root is pivoted and the command has not started, so
// /dev/pts/ptmx is the one the stages mounted; devptsPeer checks it all
// the same. The slave, owned by the command's user and the tty group as
// the host sees them, becomes the stub's stdio (stubRecvStdio); the
// master goes to the parent: on the thread's channel, or as message 'T'
// on the init's config socket (recvCommandPTY).
func (s *initState) openCommandPTY() error {
	fd, err := unix.Open("/dev/pts/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("the sandbox's /dev/pts/ptmx: %w", err)
	}
	master := os.NewFile(uintptr(fd), "ptmx")
	slave, err := devptsPeer(fd)
	if err != nil {
		master.Close()
		return err
	}
	c := &s.cfg.Exec
	if c.Rows > 0 && c.Cols > 0 {
		_ = unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: c.Rows, Col: c.Cols})
	}
	uid, gid := c.UID, 5
	if s.cfg.NestUserNS {
		uid, gid = s.cfg.RootUID+c.UID, s.cfg.RootGID+5
	}
	_ = unix.Fchown(slave, uid, gid)
	fds := []int{slave}
	closeAll := func() {
		for _, f := range fds {
			unix.Close(f)
		}
		master.Close()
	}
	for len(fds) < 3 {
		d, err := unix.FcntlInt(uintptr(slave), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			closeAll()
			return err
		}
		fds = append(fds, d)
	}
	if s.thread != nil {
		s.thread.launch.pty <- master
	} else {
		err := unix.Sendmsg(int(s.sock.Fd()), []byte{'T'}, unix.UnixRights(fd), nil, 0)
		if err != nil {
			closeAll()
			return fmt.Errorf("sending the terminal: %w", err)
		}
		master.Close() // the parent has it
	}
	s.cmdStdio = fds
	c.RecvStdio = true
	return nil
}

// sandboxPTY reports whether a run's terminal (Exec.TTY) comes from the
// sandbox's own devpts (openCommandPTY): the exec stub runs the command,
// once, in a sandbox built for it (on a thread, or by the re-executed
// init: rootless runs).
func (r *runState) sandboxPTY(cfg *initConfig) bool {
	return execStub != "" && !cfg.GoExecStage && !cfg.Persistent && !r.persistent && !cfg.Deferred
}

// recvCommandPTY receives the re-executed init's message 'T' with the
// master of the command's terminal (openCommandPTY) on the config socket.
// What the sandbox's side sends is checked as exec -t's is (devptsMux): a
// descriptor that is not a devpts multiplexer is refused. nil when the
// init ended or failed first, or sent anything else.
func recvCommandPTY(sock *os.File) *os.File {
	var b [8]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(int(sock.Fd()), b[:], oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil || n == 0 {
		return nil
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
		fds, _ = unix.ParseUnixRights(&msgs[0])
	}
	if n != 1 || b[0] != 'T' || len(fds) != 1 || devptsMux(fds[0]) != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil
	}
	return os.NewFile(uintptr(fds[0]), "ptmx")
}

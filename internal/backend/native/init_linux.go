package native

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/idletrim"
	"github.com/agentkernel/agentkernel/internal/netproc"
)

// IsInit reports whether this process is agentkernel re-executed as a
// sandbox stage (the init or the exec stage). main calls it before doing
// anything else and hands control to InitMain when it is true.
func IsInit() bool {
	return len(os.Args) > 0 && (os.Args[0] == argv0Init || os.Args[0] == argv0Exec || os.Args[0] == argv0Userns || os.Args[0] == argv0InitWait || os.Args[0] == argv0Probe)
}

// InitMain runs the stage this process was re-executed for and returns
// its exit code.
func InitMain() int {
	switch os.Args[0] {
	case argv0Init:
		return initMain()
	case argv0Exec:
		return execMain()
	case argv0Userns:
		return usernsMain()
	case argv0InitWait:
		return initWaitMain()
	case argv0Probe:
		return probeMain()
	}
	return 125
}

// initState is the init's view of one sandbox while it builds it.
type initState struct {
	cfg  *initConfig
	sock *os.File // fd 3: config in, result out
	errW *os.File // fd 4: error reports to the parent

	scratch string // per-run tmpfs holding upper/work dirs and the new root
	root    string // the new root while it is assembled (scratch/root)

	execPid  int      // the exec stage (becomes the command)
	execCfgW *os.File // socket to the exec stage
	stub     bool     // the exec stage is the assembled stub, not Go
	entered  bool     // stubEntered has run
	proc     string   // where the sandbox's proc is mounted right now

	cgroupProcs []*os.File // v1 cgroup.procs files, for the exec stage
	stubErrR    *os.File   // the stub's {index, errno} report
	usernsFd    int        // the command's user namespace, for idmapped mounts
	sigs        chan os.Signal

	// stdio are the exec stage's fds 0-2 (the init's own unless an agent
	// exec passed others).
	stdio     [3]uintptr
	homeAdded bool // prepareProcess appended HOME to the environment
	// cmdStdio are the command's stdio received with a prepared
	// sandbox's command, passed on to the stub.
	cmdStdio []int
	// prefix is a prepared sandbox's stub script up to its execve.
	prefix *stubScript

	// thread is set when these stages run on a thread of agentkernel
	// itself rather than in a re-executed init (thread_linux.go).
	thread *threadInit
	// loUp: the thread was prestarted with lo up already (package
	// prestart).
	loUp bool
	// cgroupFD is the v2 cgroup the exec stage is cloned into, or -1
	// (it inherits the init's).
	cgroupFD int
	// cgroupTasks are the v1 tasks files the exec stage's stub moves
	// itself in by (thread-built sandboxes).
	cgroupTasks []*os.File
	// earlyFilter is the seccomp program the stub loads in its first
	// script, while the root is still being mounted, rather than just
	// before its execve (thread-built sandboxes whose filter allows every
	// later step of the stub: earlySeccomp); enter is that first script.
	earlyFilter []byte
	enter       *stubScript
	// locked: lockdown has run (PID 1 holds nothing any more).
	locked bool
	// ownerNsFd is the user namespace writable host directories are
	// idmapped through (ownerUserns), or -1.
	ownerNsFd int

	// netDev is a persistent sandbox's TUN device or proxy socket
	// (netMode says which), made by the network stage and sent to the
	// supervisor with the ready message.
	netDev  *os.File
	netMode netproc.Mode
	// tunUp: the network stage made a TUN device, whose IPv6 address
	// the resolver stage waits for (tundev.AwaitLocal).
	tunUp bool

	// executor is how this sandbox is built, which decides where each
	// stage runs (stages_linux.go); ran is the set of stages run.
	executor executor
	ran      uint64
}

// initMain is PID 1 of the sandbox. It runs the stages placed in it
// (stages_linux.go), in order; doc.go explains why they are in this
// order.
func initMain() int {
	s := &initState{
		sock:      os.NewFile(fdConfig, "config"),
		errW:      os.NewFile(fdErr, "errors"),
		usernsFd:  -1,
		ownerNsFd: -1,
		cgroupFD:  -1,
		proc:      "/proc",
		sigs:      make(chan os.Signal, 8),
		stdio:     [3]uintptr{0, 1, 2},
		executor:  byReexec,
	}
	// A signal from the parent namespace would kill PID 1 by default; catch
	// the forwarded ones before anything else.
	signal.Notify(s.sigs, forwarded...)
	unix.CloseOnExec(fdConfig)
	unix.CloseOnExec(fdErr)
	closeInherited()
	// Rootless, the command has the init's uid: not dumpable keeps it from
	// ptrace and from /proc/1/fd, /proc/1/root of its PID 1.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)

	// The config comes first: it says whether to trace.
	s.ran |= 1 << stageConfig
	if err := s.readConfig(); err != nil || s.cfg == nil {
		if err == nil {
			err = errors.New("no config")
		}
		_, _ = s.errW.Write(stageReport(stageConfig, err).encode())
		return 125
	}
	if s.cfg.Trace {
		fmt.Fprintf(os.Stderr, "%s init: started\n", monotonic())
	}
	if failed, err := s.runStages(stageConfig+1, stageLast); err != nil {
		if s.execPid > 0 {
			_ = unix.Kill(s.execPid, unix.SIGKILL)
		}
		_, _ = s.errW.Write(stageReport(failed, err).encode())
		return 125
	}
	s.errW.Close()
	if s.cfg.Persistent {
		return s.becomeIdle()
	}
	return s.supervise()
}

// makeNamespaces: the parent cloned the re-executed init into its
// namespaces, and the thread unshares them (unless package prestart
// did); then every mount is made private, so that nothing done from here
// on propagates to the host.
func (s *initState) makeNamespaces() error {
	if s.thread != nil && !s.loUp {
		if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS); err != nil {
			return err
		}
	}
	if s.thread != nil && s.loUp {
		return nil // prestarted: made during start-up, mounts private
	}
	return mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
}

// openCgroup gets the cgroup ready for the exec stage: the v1
// cgroup.procs files a re-executed init moves it in by, or, on a
// thread, the cgroup the parent made meanwhile (useCgroup).
func (s *initState) openCgroup() error {
	if s.thread != nil {
		return s.useCgroup()
	}
	return s.openCgroups()
}

// startCommand is the last stage: the exec stage gets its final script
// or config, and becomes the command. The seccomp filter (and a
// prepared sandbox's command) come from the parent over the config
// socket to a re-executed init, through memory to a thread.
func (s *initState) startCommand() error {
	if s.thread != nil {
		return s.releaseFromThread()
	}
	return s.releaseExecStage()
}

// closeInherited closes every descriptor above fdErr that agentkernel's
// caller left open without close-on-exec (runc CVE-2024-21626: a host
// directory fd is a way out of every mount namespace). The Go runtime's
// own descriptors are close-on-exec and stay.
func closeInherited() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		// No /proc: at least nothing inherited survives our execs.
		_ = unix.CloseRange(fdErr+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= fdErr {
			continue
		}
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && fl&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
}

// readConfig decodes the one config message the parent queued before
// starting us.
func (s *initState) readConfig() error {
	buf := make([]byte, inlineConfigMax)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(int(s.sock.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return err
	}
	data := buf[:n]
	if oobn > 0 { // a large config, passed as a memfd (sendConfig)
		if data, err = readConfigFd(oob[:oobn]); err != nil {
			return fmt.Errorf("reading config: %w", err)
		}
	}
	s.cfg = &initConfig{}
	return json.Unmarshal(data, s.cfg)
}

// readConfigFd reads the whole memfd passed in a control message.
func readConfigFd(oob []byte) ([]byte, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("bad control message (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, fmt.Errorf("bad descriptor (%v)", err)
	}
	f := os.NewFile(uintptr(fds[0]), "config")
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(f)
}

// openCgroups opens the cgroup.procs files of a v1 cgroup while host
// paths are still reachable; releaseExecStage uses them to move the exec
// stage in.
func (s *initState) openCgroups() error {
	for _, d := range s.cfg.Cgroups {
		f, err := os.OpenFile(d+"/cgroup.procs", os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		s.cgroupProcs = append(s.cgroupProcs, f)
	}
	return nil
}

// joinExecStage moves the exec stage into the sandbox's v1 cgroup. The
// parent has moved the init by now (it says so with the filter message),
// so the kernel's migration lock is warm and this is quick.
func (s *initState) joinExecStage() error {
	for _, f := range s.cgroupProcs {
		if _, err := f.Write([]byte(strconv.Itoa(s.execPid))); err != nil {
			return fmt.Errorf("moving the command into its cgroup: %w", err)
		}
		f.Close()
	}
	s.cgroupProcs = nil
	return nil
}

// startExecStage forks the exec stage now, so that its Go runtime boots
// while we build the root filesystem. It waits for its config on a pipe,
// which releaseExecStage writes once the root is ready. With NestUserNS it
// gets a user namespace of its own mapping root to RootUID: that
// namespace owns none of the sandbox's other namespaces.
func (s *initState) startExecStage() error {
	// A socketpair rather than a pipe: the exec stage first says it is
	// running (pivotRoot waits for that: a dynamically linked binary, like
	// a cgo test binary, still loads its libraries from the old root after
	// execve returns), then reads its config.
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	r := os.NewFile(uintptr(sp[1]), "exec-config-child")
	defer r.Close()
	s.execCfgW = os.NewFile(uintptr(sp[0]), "exec-config")
	sys := &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWCGROUP,
		Setsid:     true,
		Setctty:    s.cfg.Exec.TTY && !s.cfg.Exec.SandboxPTY, // else its script takes the terminal
		Ctty:       0,
		Pdeathsig:  unix.SIGKILL,
	}
	if s.cfg.NestUserNS {
		sys.Cloneflags |= unix.CLONE_NEWUSER
		sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: s.cfg.RootUID, Size: subIDSize}}
		sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: s.cfg.RootGID, Size: subIDSize}}
		sys.GidMappingsEnableSetgroups = true
		// Creating a user namespace does not change our ids: become the
		// namespace's root (host RootUID), or we stay host root.
		sys.Credential = &syscall.Credential{Uid: 0, Gid: 0}
	}
	var pid int
	if execStub != "" && !s.cfg.GoExecStage {
		er, ew, err := os.Pipe()
		if err != nil {
			return err
		}
		defer ew.Close()
		s.stubErrR = er
		stubSys := *sys
		stubSys.Cloneflags, stubSys.UidMappings, stubSys.GidMappings, stubSys.Credential = 0, nil, nil, nil
		if s.cgroupFD >= 0 {
			stubSys.UseCgroupFD, stubSys.CgroupFD = true, s.cgroupFD
		}
		if s.thread != nil {
			stubSys.Pdeathsig = 0 // its script sets it (stubEnterScript)
		}
		files := []uintptr{s.stdio[0], s.stdio[1], s.stdio[2], r.Fd(), ew.Fd()}
		for _, f := range s.cgroupTasks {
			files = append(files, f.Fd())
		}
		pid, err = startStub(argv0Exec, files, &stubSys)
		for _, f := range s.cgroupTasks {
			f.Close() // the stub has them
		}
		s.stub = err == nil
		if s.stub {
			s.enter = stubEnterScript(s.cfg.NestUserNS, len(s.cgroupTasks), s.earlyFilter)
			s.cfg.Exec.filterLoaded = s.earlyFilter != nil
			b, err := s.enter.encode()
			if err != nil {
				return err
			}
			if _, err := s.execCfgW.Write(b); err != nil {
				return err
			}
		}
	}
	if !s.stub {
		pid, err = syscall.ForkExec("/proc/self/exe", []string{argv0Exec}, &syscall.ProcAttr{
			Env:   []string{},
			Files: []uintptr{s.stdio[0], s.stdio[1], s.stdio[2], r.Fd(), s.errW.Fd()},
			Sys:   sys,
		})
		if err != nil {
			return err
		}
	}
	s.execPid = pid
	if !s.stub && s.cfg.NestUserNS && needsIDMap(s.cfg) {
		fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		s.usernsFd = fd
	}
	return nil
}

// stubEntered waits until the stub has entered its namespaces, then maps
// root in its user namespace to subIDBase and, when volumes need it,
// keeps the namespace for idmapped mounts. It runs once, when first
// needed: the stub's first steps overlap the init's mounts.
func (s *initState) stubEntered() error {
	if !s.stub || s.entered {
		return nil
	}
	s.entered = true
	var ready [1]byte
	if _, err := s.execCfgW.Read(ready[:]); err != nil {
		var report [16]byte
		n, _ := io.ReadFull(s.stubErrR, report[:])
		return stubError(s.enter, report[:n])
	}
	if !s.cfg.NestUserNS {
		return nil
	}
	proc := s.proc + "/" + strconv.Itoa(s.execPid)
	if err := os.WriteFile(proc+"/uid_map", []byte("0 "+strconv.Itoa(s.cfg.RootUID)+" "+strconv.Itoa(subIDSize)+"\n"), 0); err != nil {
		return err
	}
	if err := os.WriteFile(proc+"/gid_map", []byte("0 "+strconv.Itoa(s.cfg.RootGID)+" "+strconv.Itoa(subIDSize)+"\n"), 0); err != nil {
		return err
	}
	if needsIDMap(s.cfg) {
		fd, err := unix.Open(proc+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		s.usernsFd = fd
	}
	return nil
}

// releaseExecStage hands the exec stage its final config; it drops
// privileges and execs the command.
func (s *initState) releaseExecStage() error {
	buf := make([]byte, 64<<10)
	n, err := s.sock.Read(buf)
	if err != nil {
		return fmt.Errorf("reading seccomp filter: %w", err)
	}
	if n == 0 || buf[0] != 'F' {
		return fmt.Errorf("seccomp filter: %s", buf[min(n, 1):n])
	}
	s.cfg.Exec.Filter = append([]byte(nil), buf[1:n]...)
	if s.cfg.Persistent {
		return s.retireExecStage()
	}
	if err := s.joinExecStage(); err != nil {
		return err
	}
	if s.cfg.Deferred {
		// Everything but the command is done before the request: the
		// cgroup move (that write can wait for an RCU grace period),
		// the stub's namespaces and the script up to its execve.
		if s.stub {
			if err := s.setUpPreparedStub(); err != nil {
				return err
			}
		}
		if err := s.awaitCommand(buf); err != nil {
			return err
		}
	}
	if s.cfg.Trace {
		fmt.Fprintf(os.Stderr, "%s init: got filter\n", monotonic())
	}
	if s.stub {
		return s.releaseStub()
	}
	if s.cfg.Exec.SandboxPTY {
		// Only the stub takes a terminal after its start (stubRecvStdio).
		return errors.New("the exec stub did not start, and the command's terminal needs it")
	}
	b, err := json.Marshal(&s.cfg.Exec)
	if err != nil {
		return err
	}
	if err := s.lockdown(); err != nil {
		return err
	}
	_, err = s.execCfgW.Write(b)
	s.execCfgW.Close()
	if s.usernsFd >= 0 {
		unix.Close(s.usernsFd)
		s.usernsFd = -1
	}
	return err
}

// setUpPreparedStub has a prepared sandbox's stub run the part of its
// script that does not need the command (buildStubPrepared) and keeps
// the rest for releaseStub.
func (s *initState) setUpPreparedStub() error {
	if err := s.stubEntered(); err != nil {
		return err
	}
	s.cfg.Exec.RecvStdio = true
	setup, rest, err := buildStubPrepared(&s.cfg.Exec)
	if err != nil {
		return err
	}
	if err := s.runStubSetup(setup); err != nil {
		return err
	}
	s.prefix = rest
	return nil
}

// runStubSetup has the stub run a prepared sandbox's set-up script (the
// exec stage's steps that do not need the command) and waits until it
// reports done, or reports which step failed.
func (s *initState) runStubSetup(setup *stubScript) error {
	b, err := setup.encode()
	if err != nil {
		return err
	}
	if _, err := s.execCfgW.Write(b); err != nil {
		return err
	}
	var done [1]byte
	if n, err := s.execCfgW.Read(done[:]); err != nil || n != 1 {
		var report [16]byte
		n, _ := io.ReadFull(s.stubErrR, report[:])
		return stubError(setup, report[:n])
	}
	return nil
}

// awaitCommand is a prepared sandbox's wait: everything is built, the
// parent is told so ('R'), and the command arrives as 'A' and its argv in
// JSON. A closed socket (the prepared sandbox was discarded) ends the init.
func (s *initState) awaitCommand(buf []byte) error {
	if _, err := s.sock.Write([]byte{'R'}); err != nil {
		return err
	}
	// A warm sandbox may wait long for its command: give memory back
	// meanwhile, as an idle persistent sandbox does.
	trim := idletrim.New(idleTrimAfter)
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := unix.Recvmsg(int(s.sock.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	trim.Stop()
	if err != nil || n == 0 {
		return fmt.Errorf("prepared sandbox discarded")
	}
	var fds []int
	if oobn > 0 {
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
			fds, _ = unix.ParseUnixRights(&msgs[0])
		}
	}
	var args []string
	if buf[0] != 'A' || len(fds) != 3 || json.Unmarshal(buf[1:n], &args) != nil || len(args) == 0 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return fmt.Errorf("bad command message")
	}
	s.cfg.Exec.Args = args
	s.cmdStdio = fds
	s.cfg.Exec.RecvStdio = true
	return nil
}

// releaseStub sends the stub its script and waits until it has exec'd
// the command (its report pipe closes) or reports which step failed.
func (s *initState) releaseStub() error {
	defer s.stubErrR.Close()
	if err := s.stubEntered(); err != nil {
		return err
	}
	c := &s.cfg.Exec
	path, err := lookPath(c.Args[0], c.Env)
	if err != nil {
		return &stageFailure{Exec: true, Errno: errnoOf(err), Msg: err.Error()}
	}
	if s.cfg.Trace {
		fmt.Fprintf(os.Stderr, "%s init: path found\n", monotonic())
	}
	if c.SandboxPTY && s.cmdStdio == nil {
		if err := s.openCommandPTY(); err != nil {
			return err
		}
	}
	script := s.prefix
	if script != nil {
		addStubExec(script, c, path)
	} else if script, err = buildStubScript(c, path); err != nil {
		return err
	}
	b, err := script.encode()
	if err != nil {
		return err
	}
	if s.cfg.Trace {
		fmt.Fprintf(os.Stderr, "%s init: script built\n", monotonic())
	}
	if s.thread == nil && !s.cfg.Persistent {
		// This process stays on as PID 1 while the command runs (a
		// persistent sandbox's agent forks exec stages for good).
		if err := s.lockdown(); err != nil {
			return err
		}
	}
	_, err = s.execCfgW.Write(b)
	if err == nil && s.cmdStdio != nil {
		// The command's stdio follow the script (stubRecvStdio); our
		// copies go, so that its output ends when it does.
		err = unix.Sendmsg(int(s.execCfgW.Fd()), []byte{0}, unix.UnixRights(s.cmdStdio...), nil, 0)
		for _, fd := range s.cmdStdio {
			unix.Close(fd)
		}
		s.cmdStdio = nil
	}
	s.execCfgW.Close()
	if s.usernsFd >= 0 {
		unix.Close(s.usernsFd)
		s.usernsFd = -1
	}
	if err != nil {
		return err
	}
	if s.cfg.Trace {
		fmt.Fprintf(os.Stderr, "%s init: script sent\n", monotonic())
	}
	var report [16]byte
	if n, _ := io.ReadFull(s.stubErrR, report[:]); n > 0 {
		return stubError(script, report[:n])
	}
	return nil
}

// supervise is the init's life as PID 1: forward signals to the command,
// reap every child, and exit with the command's status the moment it ends
// (the PID namespace's teardown then kills whatever it left behind).
func (s *initState) supervise() int {
	pid := s.execPid
	go func() {
		for sig := range s.sigs {
			forwardSignal(pid, sig.(syscall.Signal))
		}
	}()
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 125
		}
		if wpid != pid {
			continue
		}
		_, _ = s.sock.Write([]byte(strconv.Itoa(int(ws))))
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

// forwardSignal passes a signal on to the command pid, which leads its
// own session: the keyboard's signals (SIGINT, SIGQUIT) to its process
// group, the whole foreground job, as a terminal sends them (a shell
// waiting for its child ends with it), the others to the command alone
// (deliver in run_linux.go).
func forwardSignal(pid int, sig syscall.Signal) {
	if (sig == unix.SIGINT || sig == unix.SIGQUIT) && unix.Kill(-pid, sig) == nil {
		return
	}
	_ = unix.Kill(pid, sig)
}

// awaitIDMaps waits until the parent has mapped our user namespace
// (initConfig.SubIDs): 'M' with the caller's subordinate ids, 'S' with
// the caller alone (setgroups then denied).
func (s *initState) awaitIDMaps() error {
	if !s.cfg.SubIDs {
		return nil
	}
	var b [8]byte
	n, err := s.sock.Read(b[:])
	if err != nil {
		return err
	}
	switch {
	case n == 1 && b[0] == 'M':
	case n == 1 && b[0] == 'S':
		s.cfg.SubIDs, s.cfg.Exec.NoSetgroups = false, true
	default:
		return fmt.Errorf("unexpected message %q", b[:n])
	}
	return nil
}

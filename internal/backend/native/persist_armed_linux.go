package native

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
)

// A persistent sandbox's pre-armed exec stage. Starting the stub, its
// join of the sandbox's cgroup and namespaces, its user namespace and
// its maps, and the exec stage's steps that depend on nothing but the
// sandbox's exec template (bounding set, the default user's identity,
// capabilities, limits, no_new_privs, Landlock, and the seccomp filter
// when it allows the stub's remaining system calls: armedSeccomp) are
// the same for every command of the default user. So the supervisor
// does them ahead of the next request, in the background (at start and
// after each exec): the armed stub then blocks on its socket for its
// last script. A request sends it that script (take the stdio, the
// working directory, fork into the PID namespace, new session, terminal,
// seccomp unless loaded already, execve) and the three descriptors, and
// the command starts at once; the stub, which exits after the fork, is
// reaped after the reply.
//
// What the waiting stub is:
//   - in the sandbox's cgroup (joined at its start, as every exec stage
//     is, before it unshares its cgroup namespace, so that the command's
//     cgroup namespace is rooted at the sandbox's cgroup exactly as on
//     the path without it: joining later would need a privilege the
//     armed stub has dropped). It is one of the cgroup's processes: a
//     persistent sandbox's pids limit counts it (makeCgroup adds one),
//     and the freezer holds it with the rest.
//   - in the sandbox's mount, network, IPC and UTS namespaces, but not
//     in its PID namespace (setns of a PID namespace applies to
//     children only): no process of the sandbox can see it in /proc,
//     signal it or ptrace it.
//   - ended by the supervisor at stop (Stop, Kill, Close, PID 1's
//     death) before the sandbox's cgroup goes, and by its own read of
//     its socket when the supervisor dies (end of file: exit 125).
//
// Requests it cannot serve take the path that forks a stub per command
// (startExec): another user than the template's (--user), a default
// user whose ids or groups changed in the sandbox's /etc/passwd or
// /etc/group since the stub was armed (it is then replaced), and one
// that finds the armed stub gone before it could be sent the request.
// The working directory, the environment, the arguments and a terminal
// are the request's own and are served.

// armedStub is a stub waiting for its last script.
type armedStub struct {
	pid  int
	sock *os.File // the stub's fd 3
	errR *os.File // the read end of the stub's fd 4 (failure reports)
	// The identity it took.
	uid, gid int
	groups   []int
	// filterLoaded: it loaded the sandbox's seccomp filter already
	// (armedSeccomp).
	filterLoaded bool
}

// kill ends the waiting stub and reaps it.
func (a *armedStub) kill() {
	_ = unix.Kill(a.pid, unix.SIGKILL)
	reap(a.pid)
	a.sock.Close()
	a.errR.Close()
}

// armAsync arms the next exec stage in the background unless one is
// armed, being armed, or the sandbox is stopping.
func (i *Instance) armAsync() {
	if execStub == "" {
		return
	}
	i.armMu.Lock()
	if i.armStopped || i.armed != nil || i.arming != nil {
		i.armMu.Unlock()
		return
	}
	ch := make(chan struct{})
	i.arming = ch
	i.armMu.Unlock()
	go func() {
		a, _ := i.arm()
		i.armMu.Lock()
		i.arming, i.armPid = nil, 0
		if a != nil && i.armStopped {
			i.armMu.Unlock()
			a.kill()
		} else {
			i.armed = a
			i.armMu.Unlock()
		}
		close(ch)
	}()
}

// takeArmed hands out the armed stub for a command of identity c, waiting
// for one being armed for a command of the template's user; nil when
// there is none or it does not fit (the caller then forks one for the
// command).
func (i *Instance) takeArmed(c *execConfig, defaultUser bool) *armedStub {
	i.armMu.Lock()
	if ch := i.arming; ch != nil && i.armed == nil && defaultUser {
		i.armMu.Unlock()
		<-ch
		i.armMu.Lock()
	}
	a := i.armed
	if a == nil {
		i.armMu.Unlock()
		return nil
	}
	if a.uid != c.UID || a.gid != c.GID || !slices.Equal(a.groups, c.Groups) {
		if !defaultUser {
			i.armMu.Unlock()
			return nil // another user: the armed one waits for the next
		}
		// The default user's ids changed since: arm anew.
		i.armed = nil
		i.armMu.Unlock()
		a.kill()
		return nil
	}
	i.armed = nil
	i.armMu.Unlock()
	return a
}

// disarm ends the armed stub and any being armed, for good: the sandbox
// is stopping. It returns once no stub of it is left.
func (i *Instance) disarm() {
	i.armMu.Lock()
	i.armStopped = true
	a, ch := i.armed, i.arming
	i.armed = nil
	if i.armPid > 0 {
		_ = unix.Kill(i.armPid, unix.SIGKILL)
	}
	i.armMu.Unlock()
	if a != nil {
		a.kill()
	}
	if ch != nil {
		<-ch
	}
}

// arm starts a stub and runs it up to its wait: joined, identity of the
// template's user, every step before the request's.
func (i *Instance) arm() (a *armedStub, err error) {
	c := i.exec
	u, err := resolveUser("", i.rootFd, c.User)
	if err != nil {
		return nil, err
	}
	c.UID, c.GID, c.Groups = u.uid, u.gid, u.groups
	c.rootFd, c.inRoot = i.rootFd, true
	devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer devNull.Close()
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	sock := os.NewFile(uintptr(sp[0]), "exec")
	child := os.NewFile(uintptr(sp[1]), "exec-child")
	errR, errW, err := os.Pipe()
	if err != nil {
		sock.Close()
		child.Close()
		return nil, err
	}
	// The stub's ends are closed here as soon as it has them (or failed
	// to start): while the supervisor holds them, a stub killed as it
	// arms (disarm, at stop) would leave the reads below waiting for
	// ever instead of seeing end of file.
	closeChildEnds := func() {
		child.Close()
		errW.Close()
	}
	defer closeChildEnds() // the paths that return before the stub starts (a second Close is harmless)
	c.filterLoaded = len(c.Filter) > 0 && armedSeccomp(c.Filter)
	a = &armedStub{sock: sock, errR: errR, uid: c.UID, gid: c.GID, groups: c.Groups, filterLoaded: c.filterLoaded}
	files := []uintptr{devNull.Fd(), devNull.Fd(), devNull.Fd(), child.Fd(), errW.Fd()}
	var tasks []*os.File
	sys := &syscall.SysProcAttr{}
	if cg := i.r.cg; cg != nil {
		if fd := cg.openDir(); fd >= 0 {
			defer unix.Close(fd)
			sys.UseCgroupFD, sys.CgroupFD = true, fd
		} else if tasks, err = cg.openTasks(); err != nil {
			sock.Close()
			errR.Close()
			return nil, err
		}
	}
	defer closeFiles(tasks)
	for _, f := range tasks {
		files = append(files, f.Fd())
	}
	pidfdNum := len(files)
	files = append(files, uintptr(i.pidfd))
	c.umask, c.setUmask = i.umask, true
	join, setup, err := armScripts(&c, len(tasks), pidfdNum, i.rootless)
	if err != nil {
		sock.Close()
		errR.Close()
		return nil, err
	}
	pid, err := startStub(argv0Exec, files, sys)
	closeChildEnds()
	if err != nil {
		sock.Close()
		errR.Close()
		return nil, err
	}
	a.pid = pid
	i.armMu.Lock()
	stopped := i.armStopped
	if !stopped {
		i.armPid = pid
	}
	i.armMu.Unlock()
	if stopped {
		a.kill()
		return nil, errors.New("the sandbox is stopping")
	}
	started := a // the results are nil by the time a failure's defer runs
	defer func() {
		if err != nil {
			started.kill()
			a = nil
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
		return nil, err
	}
	var ready [1]byte
	if setup != nil {
		// Root: the stub waits in its new user namespace for its maps.
		if _, err := io.ReadFull(sock, ready[:]); err != nil {
			return nil, report(join)
		}
		if err := i.writeMaps(pid); err != nil {
			return nil, err
		}
		if b, err = setup.encode(); err == nil {
			_, err = sock.Write(b)
		}
		if err != nil {
			return nil, err
		}
	} else {
		setup = join
	}
	if _, err := io.ReadFull(sock, ready[:]); err != nil {
		return nil, report(setup)
	}
	return a, nil
}

// writeMaps writes the user namespace maps of the stub pid (root
// caller): root in it is the sandbox's first host id.
func (i *Instance) writeMaps(pid int) error {
	proc := "/proc/" + strconv.Itoa(pid)
	if err := os.WriteFile(proc+"/uid_map", []byte("0 "+strconv.Itoa(i.rootUID)+" "+strconv.Itoa(subIDSize)+"\n"), 0); err != nil {
		return fmt.Errorf("uid map: %w", err)
	}
	if err := os.WriteFile(proc+"/gid_map", []byte("0 "+strconv.Itoa(i.rootGID)+" "+strconv.Itoa(subIDSize)+"\n"), 0); err != nil {
		return fmt.Errorf("gid map: %w", err)
	}
	return nil
}

// armScripts builds an armed stub's scripts: join, as execJoinScripts's
// but without the fork, and for a root caller setup after the maps
// (rootless: nil, join does it all): the exec stage's steps up to
// Landlock but the working directory, then a report on fd 3 and the wait
// for the request's script (armedRequestScript).
func armScripts(c *execConfig, tasks, pidfdNum int, rootless bool) (join, setup *stubScript, err error) {
	join, setup, err = armScriptsAt(c, tasks, pidfdNum, rootless, stubCompactOff)
	steps := setup
	if steps == nil {
		steps = join
	}
	if err != nil || len(steps.recs) <= (stubCompactOff-stubHeader)/stubRecSize {
		return join, setup, err
	}
	return armScriptsAt(c, tasks, pidfdNum, rootless, 0) // many volumes: many Landlock rules
}

// armScriptsAt is armScripts with the data of the script that runs the
// steps at dataOff; a root caller's join script, a few records, has its
// data right after them.
func armScriptsAt(c *execConfig, tasks, pidfdNum int, rootless bool, dataOff int) (join, setup *stubScript, err error) {
	newSteps := func() *stubScript {
		return &stubScript{dataOff: dataOff, recs: make([]stubRecord, 0, 128), data: make([]byte, 0, 8<<10)}
	}
	if rootless {
		join = newSteps()
	} else {
		join = &stubScript{dataOff: stubHeader + (armJoinRecords+tasks)*stubRecSize}
	}
	if c.setUmask {
		join.add("umask", unix.SYS_UMASK, c.umask)
	}
	addJoinSteps(join, tasks, pidfdNum, rootless)
	start := join
	if !rootless {
		join.add("reporting ready", unix.SYS_WRITE, 3, uint64(stubBase), 1)
		join.add("reading script", stubChain)
		setup = newSteps()
		start = setup
	}
	if err := stubSetupSteps(start, c, stepWorkdir); err != nil {
		return nil, nil, err
	}
	if c.filterLoaded {
		addSeccompLoad(start, c.Filter)
	}
	start.add("reporting set-up done", unix.SYS_WRITE, 3, uint64(stubBase), 1)
	start.add("reading script", stubChain)
	return join, setup, nil
}

// armJoinRecords bounds a root caller's join script's records but its
// cgroup writes (armScriptsAt).
const armJoinRecords = 9

// armRequestRecords bounds the records of armedRequestScript, whose data
// (the argv and environment) follows them.
const armRequestRecords = 16

// armedLateSyscalls are every system call an armed stub makes after its
// set-up: its report and its read of the request's script (write, read),
// the request's steps (armedRequestScript) and its exit on failure.
var armedLateSyscalls = []uint32{
	unix.SYS_READ, unix.SYS_WRITE, unix.SYS_EXIT_GROUP, unix.SYS_CLOSE, unix.SYS_RECVMSG, unix.SYS_FCNTL,
	unix.SYS_CHDIR, stubForkSyscall, unix.SYS_SETSID, unix.SYS_IOCTL, unix.SYS_EXECVE,
}

// armedSeccomp says whether an armed stub may load the sandbox's seccomp
// filter prog at the end of its set-up rather than its command after the
// fork: prog allows every later step whatever its arguments (docker's
// profile does). The command gets the same one filter either way.
func armedSeccomp(prog []byte) bool {
	for _, nr := range armedLateSyscalls {
		if !filterAllows(prog, nr) {
			return false
		}
	}
	return true
}

// armedRequestScript is an armed stub's last script: the command's stdio
// from the message that follows it, its working directory, a byte on fd 3
// to say it forks now (startArmed), the fork into
// the sandbox's PID namespace (the armed stub reports the command's pid
// and exits), a session of its own, its terminal, seccomp and execve.
// The working directory comes after no_new_privs and Landlock here, as
// neither restricts chdir; it is the command's user's either way.
func armedRequestScript(c *execConfig, path string) *stubScript {
	s := &stubScript{dataOff: stubHeader + armRequestRecords*stubRecSize, data: make([]byte, 0, 4<<10)}
	stubRecvStdio(s)
	_ = execSteps[stepWorkdir].script(s, c, 0)
	s.add("reporting the fork", unix.SYS_WRITE, 3, uint64(stubBase), 1)
	s.add("starting the command's process", stubFork)
	s.add("new session", unix.SYS_SETSID)
	if c.TTY {
		s.add("controlling terminal", unix.SYS_IOCTL, 0, unix.TIOCSCTTY, 0)
	}
	stubSeccomp(s, c)
	addStubExec(s, c, path)
	return s
}

// startArmed starts the command with the armed stub a. served is false
// when the stub was gone before it was sent the request (killed by the
// sandbox's OOM killer, say): nothing ran, and the caller starts the
// command the other way.
func (i *Instance) startArmed(a *armedStub, c *execConfig, path string, stdio [3]int) (p agent.Process, served bool, err error) {
	setupErr := func(err error) error { return &agent.ExecError{Kind: agent.KindSetup, Msg: err.Error()} }
	reaped := false
	defer func() {
		if !reaped {
			_ = unix.Kill(a.pid, unix.SIGKILL)
			reap(a.pid)
		}
		a.sock.Close()
		a.errR.Close()
	}()
	// Its own copy: c goes to startExec when the stub was gone, and
	// that stub loads the filter itself.
	rc := *c
	rc.filterLoaded = a.filterLoaded
	req := armedRequestScript(&rc, path)
	b, err := req.encode()
	if err != nil {
		return nil, true, setupErr(err)
	}
	// A stub gone before the fork (its socket's end closed, or no byte
	// saying it forks) started nothing: the command may be started the
	// other way. One gone between that byte and the pid may have.
	if _, err := a.sock.Write(b); err != nil {
		return nil, false, nil
	}
	if err := unix.Sendmsg(int(a.sock.Fd()), []byte{0}, unix.UnixRights(stdio[:]...), nil, 0); err != nil {
		// It would wait for them forever, before its fork.
		_ = unix.Kill(a.pid, unix.SIGKILL)
	}
	failed := func(forking bool) (agent.Process, bool, error) {
		var rep [16]byte
		if n, _ := io.ReadFull(a.errR, rep[:]); n > 0 {
			return nil, true, execFailure(stubError(req, rep[:n]))
		}
		if !forking {
			return nil, false, nil
		}
		return nil, true, setupErr(errors.New("the exec stage ended as it started the command"))
	}
	var msg [9]byte // the fork byte, then the command's pid
	if _, err := io.ReadFull(a.sock, msg[:1]); err != nil {
		return failed(false)
	}
	if _, err := io.ReadFull(a.sock, msg[1:]); err != nil {
		return failed(true)
	}
	pidb := msg[1:]
	// The stub exits right after its report; the command is ours to
	// reap once it has (child subreaper), which the waiting goroutine
	// waits for first.
	reaped = true
	cmd := int(binary.LittleEndian.Uint64(pidb))
	proc := &execProc{pid: cmd, done: make(chan struct{})}
	proc.nspid = nsPid(cmd)
	var rep [16]byte
	if n, _ := io.ReadFull(a.errR, rep[:]); n > 0 {
		reap(a.pid)
		reap(cmd)
		return nil, true, execFailure(stubError(req, rep[:n]))
	}
	go func() {
		reap(a.pid)
		proc.wait()
	}()
	return proc, true, nil
}

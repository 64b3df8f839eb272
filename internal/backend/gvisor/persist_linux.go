package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Persistent sandboxes (sandbox.Booter): the same bundle, mounts and
// network as a run's, with these differences:
//
//   - The root's writable layer is the upper layer of the host-side
//     overlay, in the sandbox's own directory (<dir>/upper), kept from
//     one boot to the next; runsc runs without its own overlay
//     (--overlay2=none) so that the sandbox's writes reach it through
//     the gofer, and with --file-access=shared so that files copied in
//     from the host are seen at once.
//   - The sandbox's first process is the idle init (idle_linux.go),
//     bound read-only at idlePath; commands run beside it with
//     `runsc exec`, their stdio the caller's descriptors.
//   - Files (cp) are served on the host-side root, opened from inside
//     the boot's mount namespace and confined with openat2 (agent.FS).
//   - Stats come from `runsc events --stats` (runsc's cgroup and the
//     Sentry's own figures).
//
// The boot's runtime files (bundle, runsc's state, the error log) are in
// <dir>/gvisor, made at each boot and removed at Close.

// Boot starts the persistent sandbox spec describes (sandbox.Booter).
func (b *Backend) Boot(ctx context.Context, spec *sandbox.Spec, dir string, log *os.File) (sandbox.Instance, error) {
	return b.boot(ctx, spec, dir, log, false)
}

// boot is Boot, or with pooled a warm pool's sandbox (Prepare): one
// run's, whose writable binds are idmapped into a block of host ids
// leased for it, not a persistent sandbox's reserved one.
func (b *Backend) boot(ctx context.Context, spec *sandbox.Spec, dir string, log *os.File, pooled bool) (sandbox.Instance, error) {
	if err := refuse(b, spec); err != nil {
		return nil, err
	}
	if spec.Secrets != nil && len(spec.Secrets.Files) > 0 {
		return nil, fmt.Errorf("--secret-file is not supported for persistent sandboxes: bind the secret with -S KEY:HOST instead: %w", sandbox.ErrUnsupported)
	}
	if idleInit() == nil {
		return nil, fmt.Errorf("the gvisor backend's persistent sandboxes exist on amd64 only so far: %w", sandbox.ErrUnsupported)
	}
	runsc, err := findRunsc()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := checkRunsc(ctx, runsc, dir); err != nil {
		return nil, err
	}
	r := &run{b: b, spec: spec, runsc: runsc, id: "agentkernel-" + spec.ID, keep: dir}
	if spec.ID == "" || strings.ContainsAny(spec.ID, "/ \x00") {
		return nil, fmt.Errorf("the gvisor backend: sandbox id %q", spec.ID)
	}
	r.dir = filepath.Join(dir, "gvisor")
	// A persistent sandbox's writable binds show the same host ids at
	// each boot: its block is reserved from its first boot to its
	// removal (native.ReleaseIDs), recorded in dir.
	if !pooled && writableBind(spec) && os.Geteuid() == 0 {
		base, err := native.PersistentIDs(b.opts.DataDir, spec, dir)
		if err != nil {
			return nil, err
		}
		r.ids.reserved = base
	}
	// What a killed supervisor left: runsc's state and its cgroup
	// (runsc, killed with it, removed neither).
	if _, err := os.Stat(r.state()); err == nil {
		_ = exec.Command(runsc, "--root", r.state(), "delete", "--force", r.id).Run()
	}
	removeCgroups(cgroupName(r.id))
	if err := os.RemoveAll(r.dir); err != nil {
		return nil, err
	}
	if err := os.Mkdir(r.dir, 0o700); err != nil {
		return nil, err
	}
	// A memory snapshot's first boot restores its image (then removed:
	// later boots are cold ones).
	restoreDir := ""
	if fi, err := os.Lstat(filepath.Join(dir, sandbox.MemoryDir)); err == nil && fi.IsDir() && !pooled {
		restoreDir = filepath.Join(r.dir, "restore")
		if err := os.Rename(filepath.Join(dir, sandbox.MemoryDir), restoreDir); err != nil {
			return nil, err
		}
		r.restoreImage = filepath.Join(restoreDir, "image")
	}
	in := &Instance{r: r, done: make(chan struct{}), log: log, started: time.Now(), rootFd: -1, calls: make(chan func())}
	errLog, err := os.OpenFile(r.dir+"/runsc-error.log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	type booted struct {
		cmd    *exec.Cmd
		rootFd int
		err    error
	}
	bootCh := make(chan booted, 1)
	goLocked(func() {
		// As a run's: the thread owns the boot's mount (and network)
		// namespace and is never unlocked.
		cmd, err := r.start(sandbox.Stdio{Stdout: log, Stderr: log}, errLog, nil)
		if err != nil {
			bootCh <- booted{err: err}
			return
		}
		// The host-side root, for file operations from any thread.
		fd, err := unix.Open(r.rootfs(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		bootCh <- booted{cmd: cmd, rootFd: fd, err: err}
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		// The thread serves what must run in the boot's namespaces (a
		// detached command's runsc create) until runsc has ended.
		for {
			select {
			case f := <-in.calls:
				f()
			case werr := <-waited:
				errLog.Close()
				in.end(werr)
				return
			}
		}
	})
	bt := <-bootCh
	if bt.err != nil {
		errLog.Close()
		r.cleanup()
		return nil, bt.err
	}
	in.cmd, in.rootFd = bt.cmd, bt.rootFd
	err = nil
	if restoreDir != "" {
		// The sandbox's restore waits for each of its containers'.
		if err = in.awaitState(ctx, false); err == nil {
			err = in.restoreContainers(restoreDir)
		}
	}
	if err == nil {
		err = in.awaitRunning(ctx)
	}
	if restoreDir != "" {
		_ = os.RemoveAll(restoreDir)
		if err != nil {
			err = fmt.Errorf("restoring the memory snapshot (the next start boots the sandbox afresh from its files): %w", err)
		}
	}
	if err != nil {
		in.Kill()
		// Cut short (a cancelled context) before runsc made the
		// container, which its kill and delete then do not find:
		// runsc's own process goes too.
		select {
		case <-in.done:
		case <-time.After(killGrace):
			_ = in.cmd.Process.Kill()
		}
		in.Close()
		return nil, err
	}
	return in, nil
}

// Instance is a booted persistent gvisor sandbox (sandbox.Instance and
// agent.Sandbox).
type Instance struct {
	r       *run
	cmd     *exec.Cmd
	rootFd  int
	log     *os.File
	started time.Time

	// calls are run on the boot's thread, in its namespaces (inNS).
	calls chan func()

	mu      sync.Mutex
	stopped bool
	reason  string
	// restored are the detached commands a memory snapshot's boot
	// brought back, until the agent takes them (RestoredDetached).
	restored map[string]agent.Restored
	done     chan struct{}
	closed   sync.Once
}

var (
	_ sandbox.Instance = (*Instance)(nil)
	_ agent.Sandbox    = (*Instance)(nil)
)

// end records how runsc ended and closes Done.
func (in *Instance) end(err error) {
	in.mu.Lock()
	if !in.stopped {
		in.reason = "runsc ended"
		if msg := runscError(in.r.dir + "/runsc-error.log"); msg != "" {
			in.reason = "runsc: " + msg
		} else if err != nil {
			in.reason = "runsc: " + err.Error()
		}
	}
	in.mu.Unlock()
	close(in.done)
}

// awaitRunning waits until runsc reports the sandbox running.
func (in *Instance) awaitRunning(ctx context.Context) error { return in.awaitState(ctx, true) }

// awaitState waits until runsc knows the sandbox (a restore begun), or,
// with running, reports it running.
func (in *Instance) awaitState(ctx context.Context, running bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.CommandContext(ctx, in.r.runsc, "--root", in.r.state(), "state", in.r.id).Output()
		if err == nil {
			var st struct {
				Status string `json:"status"`
			}
			if !running || (json.Unmarshal(out, &st) == nil && st.Status == "running") {
				return nil
			}
		}
		select {
		case <-in.done:
			return fmt.Errorf("the gvisor sandbox did not start: %s", in.ExitReason())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("the gvisor sandbox did not start within 30 s")
		}
	}
}

// Done is closed once the sandbox has ended.
func (in *Instance) Done() <-chan struct{} { return in.done }

// ExitReason says how it ended: "" when it was stopped.
func (in *Instance) ExitReason() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.reason
}

// Kill ends the sandbox at once.
func (in *Instance) Kill() {
	in.mu.Lock()
	in.stopped = true
	in.mu.Unlock()
	in.r.signal(unix.SIGKILL)
	_ = exec.Command(in.r.runsc, "--root", in.r.state(), "delete", "--force", in.r.id).Run()
}

// Close waits until the sandbox has ended, then removes its runtime
// files (the writable layer stays) and its cgroup.
func (in *Instance) Close() {
	<-in.done
	in.closed.Do(func() {
		if in.rootFd >= 0 {
			unix.Close(in.rootFd)
		}
		// Detached commands' containers: their gofers end with them.
		in.deleteDetached()
		in.r.cleanup()
	})
}

// Stop ends every process of the sandbox, SIGTERM then SIGKILL after a
// grace period, and returns once it is gone.
func (in *Instance) Stop() {
	in.mu.Lock()
	in.stopped = true
	in.mu.Unlock()
	in.r.signal(unix.SIGTERM)
	select {
	case <-in.done:
	case <-time.After(killGrace):
	}
	in.Kill()
	<-in.done
}

// FS does file operations on the sandbox's root as the host sees it.
func (in *Instance) FS() *agent.FS {
	return &agent.FS{Root: in.rootFd, UID: -1, GID: -1}
}

// Stats reports the sandbox's processes, uptime and memory.
func (in *Instance) Stats() agent.Stats {
	st := agent.Stats{UptimeSeconds: time.Since(in.started).Seconds()}
	out, err := exec.Command(in.r.runsc, "--root", in.r.state(), "events", "--stats", in.r.id).Output()
	if err != nil {
		return st
	}
	var ev struct {
		Data struct {
			CPU struct {
				Usage struct {
					Total uint64 `json:"total"`
				} `json:"usage"`
			} `json:"cpu"`
			Memory struct {
				Usage struct {
					Usage uint64 `json:"usage"`
				} `json:"usage"`
			} `json:"memory"`
			Pids struct {
				Current uint64 `json:"current"`
			} `json:"pids"`
		} `json:"data"`
	}
	if json.Unmarshal(bytes.TrimSpace(out), &ev) == nil {
		st.CPUSeconds = float64(ev.Data.CPU.Usage.Total) / 1e9
		st.MemoryBytes = int64(ev.Data.Memory.Usage.Usage)
		st.Pids = int(ev.Data.Pids.Current)
	}
	return st
}

// Exec starts req's command in the sandbox with `runsc exec`, stdio as
// its descriptors 0-2, and returns once it runs (its pid in the
// sandbox is known).
func (in *Instance) Exec(req *agent.ExecRequest, stdio [3]int) (agent.Process, error) {
	p, err := in.execProcess(req)
	if err != nil {
		return nil, err
	}
	uid, gid, groups := p.uid, p.gid, p.groups
	pidFile := filepath.Join(in.r.dir, "exec-"+randomHex()+".pid")
	args := []string{"--root", in.r.state(), "exec", "--cwd", p.cwd, "--user", strconv.Itoa(uid) + ":" + strconv.Itoa(gid), "--internal-pid-file", pidFile}
	for _, g := range groups {
		args = append(args, "--additional-gids", strconv.Itoa(g))
	}
	for _, c := range p.caps {
		args = append(args, "--cap", c)
	}
	var tty *execTTY
	if req.TTY {
		if envIndex(p.env, "TERM") < 0 {
			p.env = append(p.env, "TERM=xterm")
		}
		if tty, err = newExecTTY(); err != nil {
			return nil, &agent.ExecError{Kind: agent.KindSetup, Msg: err.Error()}
		}
	}
	for _, kv := range p.env {
		args = append(args, "--env", kv)
	}
	args = append(append(args, in.r.id), p.args...)
	cmd := exec.Command(in.r.runsc, args...)
	files := make([]*os.File, 3)
	for i, fd := range stdio {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, f := range files[:i] {
				f.Close()
			}
			return nil, err
		}
		if i == 0 && tty != nil {
			// Non-blocking, so that closing it ends the bridge's
			// pending read (the poller) once the command has ended.
			_ = unix.SetNonblock(d, true)
		}
		files[i] = os.NewFile(uintptr(d), "stdio")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if tty == nil {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = files[0], files[1], files[2]
	} else {
		// runsc exec's stdio is the terminal's replica, its controlling
		// terminal: gVisor gives it to the command as its terminal.
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty.replica, tty.replica, tty.replica
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	err = cmd.Start()
	if tty != nil {
		tty.replica.Close()
	}
	if tty != nil && err == nil {
		// The terminal's master, bridged to the caller's streams,
		// which the bridge keeps until it ends.
		tty.in = files[0]
		go tty.serve(files[0], files[1])
		files[2].Close()
	} else {
		for _, f := range files {
			f.Close()
		}
	}
	if err != nil {
		if tty != nil {
			tty.close()
		}
		return nil, fmt.Errorf("starting runsc exec: %w", err)
	}
	pr := &execProc{in: in, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		if tty != nil {
			// What the command wrote last reaches the caller first.
			tty.close()
		}
		pr.status = waitStatusOf(cmd.ProcessState)
		close(pr.done)
	}()
	// The command runs once runsc has written its pid in the sandbox.
	for {
		if b, err := os.ReadFile(pidFile); err == nil && len(bytes.TrimSpace(b)) > 0 {
			pr.pid, _ = strconv.Atoi(string(bytes.TrimSpace(b)))
			os.Remove(pidFile)
			break
		}
		select {
		case <-pr.done:
			os.Remove(pidFile)
			if pr.status.ExitStatus() == runscFailed {
				return nil, &agent.ExecError{Kind: agent.KindSetup, Msg: "runsc exec could not start " + req.Args[0]}
			}
			return pr, nil
		case <-time.After(5 * time.Millisecond):
		}
	}
	return pr, nil
}

// waitStatusOf is runsc exec's end as the command's wait status:
// runsc exits 128+N when the command died of signal N.
func waitStatusOf(ps *os.ProcessState) syscall.WaitStatus {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws
	}
	code := ps.ExitCode()
	if code > 128 && code < 128+65 {
		return syscall.WaitStatus(code - 128)
	}
	return syscall.WaitStatus(code << 8)
}

// execProc is a command started by Exec.
type execProc struct {
	in     *Instance
	cmd    *exec.Cmd
	pid    int
	done   chan struct{}
	status syscall.WaitStatus
}

func (p *execProc) Pid() int { return p.pid }

func (p *execProc) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return unix.ESRCH
	default:
	}
	return exec.Command(p.in.r.runsc, "--root", p.in.r.state(), "kill", "--pid", strconv.Itoa(p.pid), p.in.r.id, strconv.Itoa(int(sig))).Run()
}

func (p *execProc) SignalGroup(sig syscall.Signal) error {
	// runsc exec does not make the command a process group's leader:
	// the command itself.
	return p.Signal(sig)
}

func (p *execProc) Wait() syscall.WaitStatus {
	<-p.done
	return p.status
}

// idleMount writes the idle init into the boot's runtime directory and
// returns its read-only bind at idlePath (its mount point made in the
// writable layer when missing).
func (r *run) idleMount() (specs.Mount, error) {
	src := r.dir + "/idle"
	if err := os.WriteFile(src, idleInit(), 0o555); err != nil {
		return specs.Mount{}, err
	}
	if err := mountPointIn(r.rootfs(), strings.TrimPrefix(idlePath, "/")); err != nil {
		return specs.Mount{}, fmt.Errorf("the idle init's mount point: %w", err)
	}
	return specs.Mount{Destination: idlePath, Type: "bind", Source: src, Options: []string{"rbind", "ro"}}, nil
}

// execTTY is a command's terminal (exec -t): a pseudo-terminal made
// here, its replica runsc exec's stdio and controlling terminal (which
// gVisor hands to the command as its terminal), its master bridged to
// the caller's streams (the caller's own terminal, if any, is the
// client's to set raw).
type execTTY struct {
	master, replica *os.File
	// in is the caller's stdin while the bridge reads it: closed by
	// close, so that the caller's terminal is not held open once the
	// command has ended (the caller waits for its last holder).
	in      *os.File
	outDone chan struct{}
}

func newExecTTY() (*execTTY, error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("a terminal: %w", err)
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(m)
		return nil, fmt.Errorf("a terminal: %w", err)
	}
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(m), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		unix.Close(m)
		return nil, fmt.Errorf("a terminal: %w", errno)
	}
	return &execTTY{master: os.NewFile(uintptr(m), "pty master"), replica: os.NewFile(r, "pty replica"), outDone: make(chan struct{})}, nil
}

// serve bridges the master to in and out until the command's side
// closes. When in is a terminal (the client's, passed over the agent's
// socket), the command's terminal takes its size and follows it.
func (t *execTTY) serve(in, out *os.File) {
	defer close(t.outDone)
	defer out.Close()
	if ws, err := unix.IoctlGetWinsize(int(in.Fd()), unix.TIOCGWINSZ); err == nil {
		_ = unix.IoctlSetWinsize(int(t.master.Fd()), unix.TIOCSWINSZ, ws)
		go t.followSize(in, *ws)
	}
	go agent.CopyToPTY(t.master, in, false)
	_, _ = io.Copy(out, t.master) // ends with EIO once the command's side closes
}

// followSize copies the size of the caller's terminal in to the
// command's when it changes, until the command has ended: the caller's
// terminal sends this process no SIGWINCH, so it is looked at every
// sizePoll. Setting it makes the kernel send SIGWINCH to the terminal's
// foreground process group, runsc exec, which passes it on to the
// command.
func (t *execTTY) followSize(in *os.File, last unix.Winsize) {
	rc, err := in.SyscallConn()
	if err != nil {
		return
	}
	tick := time.NewTicker(sizePoll)
	defer tick.Stop()
	for {
		select {
		case <-t.outDone:
			return
		case <-tick.C:
		}
		var ws *unix.Winsize
		if rc.Control(func(fd uintptr) { ws, err = unix.IoctlGetWinsize(int(fd), unix.TIOCGWINSZ) }) != nil || err != nil {
			return // in is closed
		}
		if *ws == last {
			continue
		}
		last = *ws
		_ = unix.IoctlSetWinsize(int(t.master.Fd()), unix.TIOCSWINSZ, ws)
	}
}

// sizePoll is how often a command's terminal looks at its caller's size.
const sizePoll = 100 * time.Millisecond

// close ends the bridge once the command has ended: the rest of its
// output first (ttyDrain at most).
func (t *execTTY) close() {
	select {
	case <-t.outDone:
	case <-time.After(ttyDrain):
	}
	t.master.Close()
	if t.in != nil {
		<-t.outDone
		t.in.Close()
	}
}

// keptTmp is a persistent sandbox's /tmp: gVisor mounts a tmpfs of its
// own on an empty /tmp, which files copied in from the host would never
// reach and which a stop would empty; the root's own /tmp, bound on
// itself, keeps it in the writable layer like the rest of the root.
// Not where the spec mounts something at /tmp, the root is read-only
// (its /tmp is a tmpfs) or the image's /tmp is not a plain directory
// (a symbolic link is left to gVisor to follow inside the sandbox).
func (r *run) keptTmp() (specs.Mount, bool, error) {
	if r.spec.ReadOnlyRoot || mountsAt(r.spec.Mounts, "/tmp") {
		return specs.Mount{}, false, nil
	}
	tmp := r.rootfs() + "/tmp"
	st, err := os.Lstat(tmp)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir(tmp, 0o1777); err != nil {
			return specs.Mount{}, false, err
		}
		if err := os.Chmod(tmp, 0o1777|os.ModeSticky); err != nil {
			return specs.Mount{}, false, err
		}
		st, err = os.Lstat(tmp)
	}
	if err != nil {
		return specs.Mount{}, false, err
	}
	if !st.IsDir() {
		return specs.Mount{}, false, nil
	}
	return specs.Mount{Destination: "/tmp", Type: "bind", Source: tmp, Options: []string{"rbind", "rw"}}, true, nil
}

package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/backend/engine/idle"
	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// A persistent sandbox on an engine is one container per boot whose
// command is the idle program (package idle), bind-mounted read-only
// from the sandbox's directory at idlePath: the image needs no sleep,
// no shell. Its supervisor holds it as an Instance that the agent
// server serves: each exec is the engine's exec (with a terminal when
// asked, resized as the caller's is), files are done through the
// container's root as the kernel shows it to the host
// (/proc/PID/root of its PID 1, opened once at boot; agent.FS resolves
// every path inside it, RESOLVE_IN_ROOT), stats come from the engine's
// stats. Copy-on-write mounts keep their writable layer in the
// sandbox's directory from one boot to the next; the rest of the
// container's writable layer lasts until the sandbox stops (the
// container is removed then, as when its supervisor dies: gc).

// idlePath is where the idle program is in the container.
const idlePath = "/.agentkernel-idle"

// termGrace is how long a stop waits after SIGTERM before SIGKILL.
const termGrace = 3 * time.Second

var _ sandbox.Booter = (*Backend)(nil)

// Boot starts the persistent sandbox spec describes (sandbox.Booter).
func (b *Backend) Boot(ctx context.Context, spec *sandbox.Spec, dir string, log *os.File) (sandbox.Instance, error) {
	return b.boot(ctx, spec, dir, log, false)
}

// boot is Boot, or with pooled a warm pool's container (Prepare): one
// run's, which says what it goes without to the request that takes it
// rather than through Options.Warn, and whose writable binds are
// idmapped into a block of host ids leased for it, not the persistent
// sandbox's reserved one.
func (b *Backend) boot(ctx context.Context, spec *sandbox.Spec, dir string, log *os.File, pooled bool) (sandbox.Instance, error) {
	warn := !pooled
	if idle.Binary == "" {
		return nil, b.unsupported("no persistent sandboxes on this architecture")
	}
	if spec.ID == "" || containerName(spec) == "" {
		return nil, fmt.Errorf("backend %s: the sandbox has no usable id", b.name)
	}
	if err := b.check(spec, warn); err != nil {
		return nil, err
	}
	idleFile := filepath.Join(dir, "idle")
	_ = os.Remove(idleFile)
	if err := os.WriteFile(idleFile, []byte(idle.Binary), 0o555); err != nil {
		return nil, fmt.Errorf("backend %s: %w", b.name, err)
	}
	secOpts, cleanup, err := b.securityOpts(spec)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	for _, m := range spec.Mounts {
		if m.Kind == sandbox.MountBind && m.Create {
			if err := os.MkdirAll(m.Source, 0o700); err != nil {
				return nil, fmt.Errorf("backend %s: mount %s: %w", b.name, m.Dest, err)
			}
		}
	}
	// A persistent sandbox's writable binds show the same host ids at
	// each start: its block is reserved from its first start to its
	// removal (native.ReleaseIDs), recorded in dir.
	var reserved uint32
	if !pooled && writableBind(spec) && os.Geteuid() == 0 {
		if reserved, err = native.PersistentIDs(b.opts.DataDir, spec, dir); err != nil {
			return nil, fmt.Errorf("backend %s: %w", b.name, err)
		}
	}
	owned, unmount, release, err := b.ownedBinds(spec, reserved)
	if err != nil {
		return nil, err
	}
	// The started container keeps its own copies of the mounts; a
	// pooled container's block of ids stays its own until its end
	// (removeVolumes).
	defer unmount()
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	cli, err := client.New(client.WithHost(b.host), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("backend %s: engine address %q: %w", b.name, b.host, err)
	}
	ok := false
	defer func() {
		if !ok {
			cli.Close()
		}
	}()
	ref, err := b.ensureImage(ctx, cli, spec)
	if err != nil {
		return nil, err
	}
	// A container of an earlier boot whose supervisor was killed.
	b.remove(cli, containerName(spec))
	volumes, removeCow, err := b.cowVolumes(ctx, cli, spec, dir)
	if err != nil {
		return nil, err
	}
	released = true
	removeVolumes := func() {
		removeCow()
		release()
	}
	boot := *owned
	boot.Args = []string{idlePath}
	boot.TTY = false
	opts := b.createOptions(&boot, ref, secOpts, false, volumes)
	opts.Config.Labels[LabelSandbox] = spec.Name
	opts.HostConfig.Mounts = append(opts.HostConfig.Mounts, mount.Mount{Type: mount.TypeBind, Source: idleFile, Target: idlePath, ReadOnly: true,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
	created, err := cli.ContainerCreate(ctx, opts)
	cleanup()
	if err != nil {
		removeVolumes()
		return nil, b.engineError("creating the container", err)
	}
	i := &instance{b: b, cli: cli, id: created.ID, spec: spec, root: -1, done: make(chan struct{}), removeVolumes: removeVolumes, start: time.Now()}
	fail := func(err error) (sandbox.Instance, error) {
		b.remove(cli, i.id)
		removeVolumes()
		return nil, err
	}
	if _, err := cli.ContainerStart(ctx, i.id, client.ContainerStartOptions{}); err != nil {
		return fail(b.startError(&boot, err))
	}
	in, err := cli.ContainerInspect(ctx, i.id, client.ContainerInspectOptions{})
	if err != nil || in.Container.State == nil || in.Container.State.Pid <= 0 {
		return fail(fmt.Errorf("backend %s: the container did not stay up (%v)", b.name, err))
	}
	i.pid = in.Container.State.Pid
	// Its root as the kernel shows it to the host: every file operation
	// resolves inside it.
	fd, err := unix.Open("/proc/"+strconv.Itoa(i.pid)+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("backend %s: the container's root (a local engine is needed): %w", b.name, err))
	}
	i.root = fd
	// The pid still the container's PID 1 after the open: not a process
	// that took a pid freed meanwhile.
	if in, err := cli.ContainerInspect(ctx, i.id, client.ContainerInspectOptions{}); err != nil || in.Container.State == nil ||
		!in.Container.State.Running || in.Container.State.Pid != i.pid {
		unix.Close(fd)
		return fail(fmt.Errorf("backend %s: the container ended while it was booting (%v)", b.name, err))
	}
	go i.watch()
	ok = true
	if log != nil {
		fmt.Fprintf(log, "backend %s: container %.12s, pid %d\n", b.name, i.id, i.pid)
	}
	return i, nil
}

// instance is a running persistent sandbox on an engine.
type instance struct {
	b             *Backend
	cli           *client.Client
	id            string
	spec          *sandbox.Spec
	pid           int // its PID 1, as the host sees it
	root          int
	start         time.Time
	removeVolumes func()

	done     chan struct{}
	mu       sync.Mutex
	stopping bool
	reason   string
	closed   sync.Once
}

// watch waits for the container's end.
func (i *instance) watch() {
	defer close(i.done)
	w := i.cli.ContainerWait(context.Background(), i.id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	var why string
	select {
	case r := <-w.Result:
		why = fmt.Sprintf("the container ended (status %d)", r.StatusCode)
		if r.Error != nil && r.Error.Message != "" {
			why += ": " + r.Error.Message
		}
	case err := <-w.Error:
		why = "lost the engine: " + err.Error()
	}
	i.mu.Lock()
	if !i.stopping {
		i.reason = why
	}
	i.mu.Unlock()
}

func (i *instance) Done() <-chan struct{} { return i.done }

func (i *instance) ExitReason() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.reason
}

func (i *instance) Kill() {
	i.mu.Lock()
	i.stopping = true
	i.mu.Unlock()
	_, _ = i.cli.ContainerKill(context.Background(), i.id, client.ContainerKillOptions{Signal: "KILL"})
}

// Stop passes SIGTERM to every process (the idle program does), then
// SIGKILL after termGrace, and returns once the container has ended.
func (i *instance) Stop() {
	i.mu.Lock()
	i.stopping = true
	i.mu.Unlock()
	_, _ = i.cli.ContainerKill(context.Background(), i.id, client.ContainerKillOptions{Signal: "TERM"})
	deadline := time.Now().Add(termGrace)
	for time.Now().Before(deadline) {
		select {
		case <-i.done:
			return
		case <-time.After(50 * time.Millisecond):
		}
		if i.processes() <= 1 {
			break
		}
	}
	i.Kill()
	<-i.done
}

// processes is how many processes the container has (0 if unknown).
func (i *instance) processes() int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(i.pid) + "/task/" + strconv.Itoa(i.pid) + "/children")
	if err != nil {
		return 0
	}
	return 1 + len(strings.Fields(string(b)))
}

// Close waits for the end, then removes the container and its volumes.
func (i *instance) Close() {
	<-i.done
	i.closed.Do(func() {
		if i.root >= 0 {
			unix.Close(i.root)
		}
		i.b.remove(i.cli, i.id)
		i.removeVolumes()
		i.cli.Close()
	})
}

// FS does file operations inside the container's root; files created
// are the supervisor's (root: the container's root on a rootful
// engine).
func (i *instance) FS() *agent.FS {
	return &agent.FS{Root: i.root, InSandbox: true, UID: -1, GID: -1}
}

// Stats are the engine's figures for the container.
func (i *instance) Stats() agent.Stats {
	st := agent.Stats{UptimeSeconds: time.Since(i.start).Seconds(), InitRSS: agent.ProcRSS(i.pid)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := i.cli.ContainerStats(ctx, i.id, client.ContainerStatsOptions{})
	if err != nil {
		return st
	}
	defer r.Body.Close()
	var s container.StatsResponse
	if json.NewDecoder(r.Body).Decode(&s) == nil {
		st.Pids = int(s.PidsStats.Current)
		st.MemoryBytes = int64(s.MemoryStats.Usage)
		st.CPUSeconds = float64(s.CPUStats.CPUUsage.TotalUsage) / 1e9
	}
	return st
}

// Exec runs req through the engine's exec API with stdio as its
// streams (sandbox's agent.Sandbox).
func (i *instance) Exec(req *agent.ExecRequest, stdio [3]int) (agent.Process, error) {
	if len(req.Args) == 0 {
		return nil, &agent.ExecError{Kind: agent.KindExec, Errno: syscall.ENOENT, Msg: "no command"}
	}
	if err := i.lookExec(req); err != nil {
		return nil, err
	}
	var fds [3]int
	for n, fd := range stdio {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, c := range fds[:n] {
				unix.Close(c)
			}
			return nil, err
		}
		fds[n] = d
	}
	p := &process{i: i, fds: fds, tty: req.TTY, pidfd: -1, ended: make(chan struct{})}
	opts := client.ExecCreateOptions{Cmd: req.Args, Env: req.Env, WorkingDir: req.Workdir, User: req.User, TTY: req.TTY,
		AttachStdin: true, AttachStdout: true, AttachStderr: true}
	if req.TTY {
		if ws, err := unix.IoctlGetWinsize(fds[0], unix.TIOCGWINSZ); err == nil && ws.Row > 0 {
			opts.ConsoleSize = client.ConsoleSize{Height: uint(ws.Row), Width: uint(ws.Col)}
		}
	}
	ctx := context.Background()
	ex, err := i.cli.ExecCreate(ctx, i.id, opts)
	if err != nil {
		p.closeFds()
		return nil, i.b.engineError("exec", err)
	}
	p.execID = ex.ID
	att, err := i.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{TTY: req.TTY, ConsoleSize: opts.ConsoleSize})
	if err != nil {
		p.closeFds()
		return nil, i.b.engineError("exec", err)
	}
	p.att = att.HijackedResponse
	// The exec's pid, once the engine has started it.
	for n := 0; n < 200; n++ {
		in, err := i.cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
		if err == nil && (in.PID > 0 || !in.Running && n > 0) {
			p.hostPid = in.PID
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if p.hostPid > 0 {
		if pfd, err := unix.PidfdOpen(p.hostPid, 0); err == nil {
			p.pidfd = pfd
		}
		p.nsPid = nsPid(p.hostPid)
	}
	go p.pump()
	return p, nil
}

// nsPid is host pid's pid in its innermost PID namespace.
func nsPid(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.Atoi(f[len(f)-1])
				return n
			}
		}
	}
	return 0
}

// process is one exec in a persistent sandbox.
type process struct {
	i       *instance
	execID  string
	att     client.HijackedResponse
	fds     [3]int
	tty     bool
	hostPid int
	nsPid   int
	mu      sync.Mutex // guards pidfd, closed when the command has ended
	pidfd   int
	ended   chan struct{}
	status  syscall.WaitStatus
}

func (p *process) closeFds() {
	for _, fd := range p.fds {
		unix.Close(fd)
	}
}

// pump copies the caller's stdin in and the output out until the exec's
// stream ends, then takes its exit code.
func (p *process) pump() {
	defer close(p.ended)
	wake, err := newWaker()
	inDone := make(chan struct{})
	if err == nil {
		go func() {
			defer close(inDone)
			p.copyIn(wake)
		}()
	} else {
		close(inDone)
		unix.Close(p.fds[0])
	}
	out := os.NewFile(uintptr(p.fds[1]), "stdout")
	errw := os.NewFile(uintptr(p.fds[2]), "stderr")
	var resize chan struct{}
	if p.tty {
		resize = make(chan struct{})
		go p.followSize(resize)
		_, _ = io.Copy(out, p.att.Reader)
		close(resize)
	} else {
		_, _ = stdcopy.StdCopy(out, errw, p.att.Reader)
	}
	p.att.Close()
	if wake != nil {
		wake.wake()
		<-inDone
		wake.close()
	}
	code := -1
	for n := 0; n < 400; n++ {
		in, err := p.i.cli.ExecInspect(context.Background(), p.execID, client.ExecInspectOptions{})
		if err != nil {
			break
		}
		if !in.Running {
			code = in.ExitCode
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code < 0 {
		code = 255
	}
	p.status = syscall.WaitStatus(code << 8)
	_ = out.Close()
	_ = errw.Close()
	p.mu.Lock()
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
		p.pidfd = -1
	}
	p.mu.Unlock()
}

// copyIn copies the caller's stdin into the exec until its end, or until
// the exec ends (wake).
func (p *process) copyIn(w *waker) {
	defer unix.Close(p.fds[0])
	buf := make([]byte, 32<<10)
	for {
		fds := []unix.PollFd{{Fd: int32(p.fds[0]), Events: unix.POLLIN}, {Fd: int32(w.r), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents == 0 {
			continue
		}
		n, err := unix.Read(p.fds[0], buf)
		if n > 0 {
			if _, werr := p.att.Conn.Write(buf[:n]); werr != nil {
				return
			}
		}
		if n == 0 || (err != nil && err != unix.EINTR && err != unix.EAGAIN) {
			if !p.tty {
				_ = p.att.CloseWrite()
			}
			return
		}
	}
}

// followSize gives the exec's terminal the caller's size as it changes.
func (p *process) followSize(stop <-chan struct{}) {
	var last unix.Winsize
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		if ws, err := unix.IoctlGetWinsize(p.fds[1], unix.TIOCGWINSZ); err == nil && ws.Row > 0 && *ws != last {
			last = *ws
			_, _ = p.i.cli.ExecResize(context.Background(), p.execID, client.ExecResizeOptions{Height: uint(ws.Row), Width: uint(ws.Col)})
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

func (p *process) Pid() int { return p.nsPid }

func (p *process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pidfd < 0 {
		select {
		case <-p.ended:
			return unix.ESRCH
		default:
		}
		return errors.New("the command's process is not known")
	}
	return unix.PidfdSendSignal(p.pidfd, sig, nil, 0)
}

func (p *process) SignalGroup(sig syscall.Signal) error {
	select {
	case <-p.ended:
		return unix.ESRCH
	default:
	}
	if p.hostPid > 0 {
		if pg, err := unix.Getpgid(p.hostPid); err == nil && pg == p.hostPid {
			return unix.Kill(-p.hostPid, sig)
		}
	}
	return p.Signal(sig)
}

func (p *process) Wait() syscall.WaitStatus {
	<-p.ended
	return p.status
}

// waker wakes a poll: its read end becomes readable once woken.
type waker struct{ r, w int }

func newWaker() (*waker, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	return &waker{r: fds[0], w: fds[1]}, nil
}

func (w *waker) wake() { _, _ = unix.Write(w.w, []byte{0}) }

func (w *waker) close() {
	unix.Close(w.r)
	unix.Close(w.w)
}

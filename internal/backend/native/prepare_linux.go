package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Prepared sandboxes (warm pools). Prepare runs every stage of Run up to
// the command's start: namespaces, cgroup, root filesystem, /proc, /dev,
// volumes, pivot, the exec stage waiting for its script, the seccomp
// filter compiled and sent. The init then says 'R' on the config socket
// and blocks. Run sends the argv ('A' and JSON), and from there on it is
// exactly an ephemeral run: the init builds the exec stage's script, the
// command runs as its only child, and the sandbox is torn down when it
// ends. A prepared sandbox runs one command, ever.
//
// The command's stdin, stdout and stderr come with it: Run passes the
// three descriptors with the argv (SCM_RIGHTS), the init hands them to
// the exec stage after its script, and the stub installs them as 0-2
// before execve (stubRecvStdio). A file (a terminal, a pipe of the
// caller) reaches the command as it is, exactly as with Run.

// maxPreparedArgs bounds the JSON argv Run sends in one message.
const maxPreparedArgs = 60 << 10

// Prepared is a sandbox built up to its command's start.
type Prepared struct {
	r *runState
	l *launched
	// tl is set when the sandbox was built on a thread that now waits
	// for the command (thread_linux.go).
	tl *threadLaunch

	mu   sync.Mutex
	used bool
}

// Prepare builds a sandbox for spec (its Args are ignored) and returns
// once it is ready for its command. The caller must Run or Close it.
func (b *Backend) Prepare(ctx context.Context, spec *sandbox.Spec) (sandbox.Prepared, error) {
	if spec.TTY || spec.Keep {
		return nil, fmt.Errorf("a prepared sandbox has no terminal and keeps nothing: %w", sandbox.ErrUnsupported)
	}
	r := &runState{b: b, spec: spec, id: spec.ID, prepared: true}
	if r.id == "" {
		r.id = randomID()
	}
	ok := false
	defer func() {
		if !ok {
			_, _ = r.stopNetwork()
			r.cleanup()
		}
	}()
	cfg, err := r.buildConfig()
	if err != nil {
		return nil, err
	}
	cfg.Deferred = true

	if cfg.GoExecStage || execStub == "" {
		// Only the stub exec stage can take its stdio late.
		return nil, fmt.Errorf("this command environment needs the Go exec stage, which a prepared sandbox cannot use: %w", sandbox.ErrUnsupported)
	}
	// Until its command comes, the sandbox's stdio are /dev/null.
	io3, err := newStdioFiles(sandbox.Stdio{})
	if err != nil {
		return nil, err
	}
	p := &Prepared{r: r}
	if r.threadable(cfg) {
		if err := p.prepareOnThread(ctx, cfg, io3); err != nil {
			return nil, err
		}
		ok = true
		return p, nil
	}
	if err := r.makeCgroup(cfg); err != nil {
		io3.closeChild()
		return nil, err
	}
	l, err := r.launch(cfg, io3)
	io3.closeChild()
	if err != nil {
		return nil, err
	}
	p.l = l

	// Wait for 'R' (ready), or for the init to fail. The same reader
	// then delivers the command's status (Run).
	ready := make(chan error, 1)
	l.result = make(chan syscall.WaitStatus, 1)
	go func() {
		defer close(l.result)
		var b [32]byte
		if cfg.Network {
			// The network stage's message comes first (awaitNetwork).
			done := make(chan struct{})
			r.awaitNetwork(l.sock, done, l.pid)
		}
		n, err := l.sock.Read(b[:])
		if err != nil || n != 1 || b[0] != 'R' {
			ready <- errors.New("the sandbox init ended before it was ready")
			return
		}
		ready <- nil
		n, err = l.sock.Read(b[:])
		if err != nil || n == 0 {
			return
		}
		if v, err := strconv.Atoi(string(b[:n])); err == nil {
			l.result <- syscall.WaitStatus(v)
		}
	}()
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		_ = unix.Kill(l.pid, unix.SIGKILL)
		<-l.waitCh
		if msg := <-l.errCh; len(msg) > 0 {
			if e := parseInitError(msg); e != nil {
				err = e
			}
		}
		l.sock.Close()
		return nil, err
	}
	ok = true
	return p, nil
}

// Run runs args as the sandbox's command to completion, like Backend.Run,
// and tears the sandbox down. Signals from sigs are forwarded to the
// command (SIGTERM, SIGINT, SIGHUP kill it after a grace period).
func (p *Prepared) Run(ctx context.Context, args []string, stdio sandbox.Stdio, sigs <-chan os.Signal) (sandbox.Result, error) {
	p.mu.Lock()
	if p.used {
		p.mu.Unlock()
		return sandbox.Result{}, errors.New("a prepared sandbox runs one command")
	}
	p.used = true
	p.mu.Unlock()
	msg, err := json.Marshal(args)
	if err != nil || len(args) == 0 || len(msg) > maxPreparedArgs {
		p.discard()
		return sandbox.Result{}, fmt.Errorf("the command does not fit a prepared sandbox: %w", sandbox.ErrUnsupported)
	}
	// The teardown may finish after Run returns (wait); the cgroup goes
	// when the init is gone.
	p.l.reaped = func() {
		p.l.sock.Close()
		p.r.cleanup()
		p.r.b.bg.Done()
	}
	p.r.b.bg.Add(1)
	// The command's stdio travel with it: files as they are (a terminal
	// stays the command's own), anything else through a pipe.
	io3, err := newStdioFiles(stdio)
	if err != nil {
		p.discard()
		p.r.b.bg.Done()
		return sandbox.Result{}, err
	}
	fds := []int{int(io3.child[0].Fd()), int(io3.child[1].Fd()), int(io3.child[2].Fd())}
	if p.tl != nil {
		err = p.tl.send(args, fds)
	} else {
		err = unix.Sendmsg(int(p.l.sock.Fd()), append([]byte{'A'}, msg...), unix.UnixRights(fds...), nil, 0)
	}
	io3.closeChild()
	if err != nil {
		p.kill()
	}
	io3.start()
	if sigs == nil {
		sigs = make(chan os.Signal)
	}
	res, err := p.r.wait(ctx, p.l, sigs, nil, io3.wait)
	if rep, nerr := p.r.stopNetwork(); err == nil {
		res.NetworkDenials, res.NetworkSummary = rep.Denials, rep.Summary
		if nerr != nil {
			p.r.warn("network: " + nerr.Error())
		}
	}
	return res, err
}

// Warnings are what a direct run of the same spec would have warned
// about while building it (no cgroup limits, rootless without
// delegation): the runner shows them to the command's user.
func (p *Prepared) Warnings() []string { return p.r.warnings }

// kill ends the init (and with it the sandbox).
func (p *Prepared) kill() {
	if p.tl != nil && !p.tl.sent {
		close(p.tl.cmd) // the thread kills its stages and ends
		p.tl.sent = true
	}
	_ = unix.Kill(p.l.pid, unix.SIGKILL)
	if p.l.initPid > 0 {
		_ = unix.Kill(p.l.initPid, unix.SIGKILL)
	}
	if p.r.cg != nil {
		p.r.cg.kill()
	}
}

// Close discards a prepared sandbox that was not run; after Run it does
// nothing.
func (p *Prepared) Close() {
	p.mu.Lock()
	if p.used {
		p.mu.Unlock()
		return
	}
	p.used = true
	p.mu.Unlock()
	p.discard()
}

func (p *Prepared) discard() {
	_, _ = p.r.stopNetwork()
	p.kill()
	<-p.l.waitCh
	<-p.l.errCh
	p.l.sock.Close()
	p.r.cleanup()
}

// Drain waits until every sandbox whose Run has returned is gone (their
// teardown, cgroup included, finishes in the background).
func (b *Backend) Drain() { b.bg.Wait() }

// prepareOnThread builds the sandbox on a thread (thread_linux.go) that
// then waits for the command.
func (p *Prepared) prepareOnThread(ctx context.Context, cfg *initConfig, io3 *stdioFiles) error {
	tl, err := p.r.launchThread(cfg, io3, nil)
	if err != nil {
		return err
	}
	p.tl, p.l = tl, tl.l
	select {
	case <-tl.ready:
		return nil
	case <-p.l.waitCh:
		// The exec stage died while the sandbox was built.
		if e := parseInitError(<-p.l.errCh); e != nil {
			return e
		}
		return errors.New("the sandbox ended before it was ready")
	case <-ctx.Done():
		p.kill()
		<-p.l.waitCh
		<-p.l.errCh
		return ctx.Err()
	}
}

// send hands the waiting thread the command with its own copies of the
// three descriptors.
func (tl *threadLaunch) send(args []string, fds []int) error {
	var own []int
	for _, fd := range fds {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			for _, o := range own {
				unix.Close(o)
			}
			return err
		}
		own = append(own, d)
	}
	tl.sent = true
	tl.cmd <- threadCmd{args: args, stdio: own}
	return nil
}

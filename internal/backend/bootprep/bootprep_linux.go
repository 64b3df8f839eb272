package bootprep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Booted is a booted sandbox that starts commands beside its idle init
// (a backend's persistent Instance).
type Booted interface {
	sandbox.Instance
	Exec(req *agent.ExecRequest, stdio [3]int) (agent.Process, error)
}

// drainGrace is how long the command's output may take to reach its end
// once the command has ended, before the sandbox is killed (which ends
// whatever the command left holding it): a process left running does not
// keep a pooled run, where an ephemeral run's sandbox ends with its
// command.
const drainGrace = 50 * time.Millisecond

// drainMax bounds the wait for the output once the sandbox was killed.
const drainMax = 5 * time.Second

// Prepared is a booted sandbox waiting for its one command.
type Prepared struct {
	in       Booted
	timeout  time.Duration
	remove   func()
	bg       *sync.WaitGroup
	warnings []string

	once     sync.Once
	used     bool
	mu       sync.Mutex
	teardown sync.Once
}

// New wraps in, booted for spec: the command's timeout is spec's;
// remove (may be nil) deletes what the sandbox kept on the host once it
// has ended (its directory); the background teardown after a run is
// counted in bg (the backend's Drain waits for it).
func New(in Booted, spec *sandbox.Spec, remove func(), bg *sync.WaitGroup, warnings []string) *Prepared {
	if remove == nil {
		remove = func() {}
	}
	return &Prepared{in: in, timeout: spec.Resources.Timeout, remove: remove, bg: bg, warnings: warnings}
}

// Warnings are what booting the sandbox warned about.
func (p *Prepared) Warnings() []string { return p.warnings }

// Close discards the sandbox: it ends, then its traces are removed.
func (p *Prepared) Close() {
	p.mu.Lock()
	p.used = true
	p.mu.Unlock()
	p.destroy()
}

func (p *Prepared) destroy() {
	p.teardown.Do(func() {
		p.in.Kill()
		p.in.Close()
		p.remove()
	})
}

// destroyLater tears the sandbox down in the background.
func (p *Prepared) destroyLater() {
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		p.destroy()
	}()
}

// Run runs args in the sandbox with stdio, forwarding sigs, and returns
// how it ended as an ephemeral run of the same spec reports it; the
// sandbox is removed afterwards (in the background: the backend's Drain
// waits). A Prepared runs one command: a second Run fails.
func (p *Prepared) Run(ctx context.Context, args []string, stdio sandbox.Stdio, sigs <-chan os.Signal) (sandbox.Result, error) {
	p.mu.Lock()
	used := p.used
	p.used = true
	p.mu.Unlock()
	if used {
		return sandbox.Result{}, errors.New("a prepared sandbox runs one command only")
	}
	defer p.destroyLater()
	if len(args) == 0 {
		return sandbox.Result{}, fmt.Errorf("no command: %w", sandbox.ErrNotFound)
	}
	sio, err := newStdio(stdio)
	if err != nil {
		return sandbox.Result{}, err
	}
	defer sio.close()
	proc, err := p.in.Exec(&agent.ExecRequest{Args: args}, sio.fds)
	sio.started()
	if err != nil {
		var ee *agent.ExecError
		if errors.As(err, &ee) {
			if kind := sandbox.ExecErrno(ee.Errno); kind != nil && ee.Kind == agent.KindExec {
				return sandbox.Result{}, fmt.Errorf("%s: %w", args[0], kind)
			}
		}
		return sandbox.Result{}, err
	}
	exited := make(chan syscall.WaitStatus, 1)
	go func() { exited <- proc.Wait() }()
	var (
		res       sandbox.Result
		timeout   <-chan time.Time
		killed    bool
		cancelled bool
		ws        syscall.WaitStatus
	)
	if p.timeout > 0 {
		t := time.NewTimer(p.timeout)
		defer t.Stop()
		timeout = t.C
	}
	kill := func() {
		if !killed {
			killed = true
			p.in.Kill()
		}
	}
	done := ctx.Done()
wait:
	for {
		select {
		case ws = <-exited:
			break wait
		case <-done:
			cancelled, done = true, nil
			kill()
		case <-timeout:
			res.TimedOut, timeout = true, nil
			kill()
		case s := <-sigs:
			if n, ok := s.(syscall.Signal); ok {
				_ = proc.Signal(n)
			}
		}
	}
	killedFirst := killed
	// The output the command wrote, to its end: what a process it left
	// behind holds open ends with the sandbox.
	if !sio.drained(drainGrace) {
		kill()
		sio.drained(drainMax)
	}
	switch {
	case killedFirst:
		res.ExitCode, res.Signal = 128+int(syscall.SIGKILL), int(syscall.SIGKILL)
	case ws.Signaled():
		res.ExitCode, res.Signal = 128+int(ws.Signal()), int(ws.Signal())
	default:
		res.ExitCode = ws.ExitStatus()
	}
	if cancelled && !res.TimedOut {
		return res, ctx.Err()
	}
	return res, nil
}

// stdio are the command's descriptors 0-2: the caller's files where
// they are files, else pipes copied to and from the caller's streams.
type stdio struct {
	fds [3]int
	// theirs are the ends handed to the command, closed once it has
	// started (the backend keeps its own copies).
	theirs []*os.File
	// ours are the pipes' ends here, closed at the end.
	ours []*os.File
	// out is closed once every output pipe has reached its end.
	out chan struct{}
}

func newStdio(s sandbox.Stdio) (*stdio, error) {
	st := &stdio{out: make(chan struct{})}
	var copies sync.WaitGroup
	fail := func(err error) (*stdio, error) {
		st.started()
		st.close()
		return nil, err
	}
	if f, ok := s.Stdin.(*os.File); ok && f != nil {
		st.fds[0] = int(f.Fd())
	} else if s.Stdin == nil {
		null, err := os.Open(os.DevNull)
		if err != nil {
			return fail(err)
		}
		st.theirs = append(st.theirs, null)
		st.fds[0] = int(null.Fd())
	} else {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		st.theirs, st.ours = append(st.theirs, r), append(st.ours, w)
		st.fds[0] = int(r.Fd())
		go func() {
			_, _ = io.Copy(w, s.Stdin)
			w.Close()
		}()
	}
	for n, wr := range []io.Writer{s.Stdout, s.Stderr} {
		if f, ok := wr.(*os.File); ok && f != nil {
			st.fds[n+1] = int(f.Fd())
			continue
		}
		if wr == nil {
			wr = io.Discard
		}
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		st.theirs, st.ours = append(st.theirs, w), append(st.ours, r)
		st.fds[n+1] = int(w.Fd())
		copies.Add(1)
		go func() {
			defer copies.Done()
			_, _ = io.Copy(wr, r)
		}()
	}
	go func() {
		copies.Wait()
		close(st.out)
	}()
	return st, nil
}

// started closes the ends handed to the command.
func (s *stdio) started() {
	for _, f := range s.theirs {
		f.Close()
	}
	s.theirs = nil
}

// drained waits up to d for the output pipes' ends.
func (s *stdio) drained(d time.Duration) bool {
	select {
	case <-s.out:
		return true
	case <-time.After(d):
		return false
	}
}

func (s *stdio) close() {
	for _, f := range s.ours {
		f.Close()
	}
}

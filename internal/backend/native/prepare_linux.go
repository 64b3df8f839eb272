package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
// Its stdio are pipes made at Prepare (the exec stage inherits them when
// it is forked, long before the command is known); Run copies them to and
// from the streams it is given.

// maxPreparedArgs bounds the JSON argv Run sends in one message.
const maxPreparedArgs = 60 << 10

// Prepared is a sandbox built up to its command's start.
type Prepared struct {
	r *runState
	l *launched

	stdinW           *os.File
	stdoutR, stderrR *os.File

	mu   sync.Mutex
	used bool
}

// Prepare builds a sandbox for spec (its Args are ignored) and returns
// once it is ready for its command. The caller must Run or Close it.
func (b *Backend) Prepare(ctx context.Context, spec *sandbox.Spec) (sandbox.Prepared, error) {
	if spec.Network.Mode == sandbox.NetworkFull {
		return nil, fmt.Errorf("network egress is %w yet by the native backend", sandbox.ErrUnsupported)
	}
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
			r.cleanup()
		}
	}()
	cfg, err := r.buildConfig()
	if err != nil {
		return nil, err
	}
	cfg.Deferred = true

	// Pipes for stdin, stdout and stderr: the child ends go to the init.
	var ends [6]*os.File
	for i := 0; i < 3; i++ {
		rd, wr, err := os.Pipe()
		if err != nil {
			for _, f := range ends {
				if f != nil {
					f.Close()
				}
			}
			return nil, err
		}
		ends[2*i], ends[2*i+1] = rd, wr
	}
	io3 := &stdioFiles{child: [3]*os.File{ends[0], ends[3], ends[5]}, ours: []*os.File{ends[0], ends[3], ends[5]}}
	p := &Prepared{r: r, stdinW: ends[1], stdoutR: ends[2], stderrR: ends[4]}
	l, err := r.launch(cfg, io3)
	if err != nil {
		io3.closeChild()
		p.closePipes()
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
		p.closePipes()
		return nil, err
	}
	ok = true
	return p, nil
}

func (p *Prepared) closePipes() {
	for _, f := range []*os.File{p.stdinW, p.stdoutR, p.stderrR} {
		if f != nil {
			f.Close()
		}
	}
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
	var outs sync.WaitGroup
	copyOut := func(w io.Writer, r *os.File) {
		outs.Add(1)
		go func() {
			defer outs.Done()
			if w == nil {
				w = io.Discard
			}
			_, _ = io.Copy(w, r)
			r.Close()
		}()
	}
	copyOut(stdio.Stdout, p.stdoutR)
	copyOut(stdio.Stderr, p.stderrR)
	if stdio.Stdin == nil {
		p.stdinW.Close()
	} else {
		// Not waited for: the reader may block forever.
		go func() { _, _ = io.Copy(p.stdinW, stdio.Stdin); p.stdinW.Close() }()
	}
	if _, err := p.l.sock.Write(append([]byte{'A'}, msg...)); err != nil {
		p.kill()
	}
	if sigs == nil {
		sigs = make(chan os.Signal)
	}
	return p.r.wait(ctx, p.l, sigs, nil, outs.Wait)
}

// kill ends the init (and with it the sandbox).
func (p *Prepared) kill() {
	_ = unix.Kill(p.l.pid, unix.SIGKILL)
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
	p.kill()
	<-p.l.waitCh
	<-p.l.errCh
	p.l.sock.Close()
	p.closePipes()
	p.r.cleanup()
}

// Drain waits until every sandbox whose Run has returned is gone (their
// teardown, cgroup included, finishes in the background).
func (b *Backend) Drain() { b.bg.Wait() }

package runcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/audit"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/sandboxdir"
)

// ExecuteSandboxCommand runs, in the agentkernel binary, the command line
// argv (without the program name) of 'exec', 'attach' or 'cp' into a
// running persistent sandbox: ParseSandboxCommand, then the command, over a
// sandbox.Manager whose persistent parts are the sandbox's directory
// alone (its socket and spec.json: no state store). It answers
// ErrNeedsFull, before it has done anything the user can see, for every
// other command line, help, a command line ParseSandboxCommand refuses
// (agentkernel-full says why, in the same words), and a sandbox it cannot
// reach or whose spec it cannot read (agentkernel-full's state store
// says whether it is unknown or stopped).
func (a *App) ExecuteSandboxCommand(argv []string) error {
	l, err := a.ParseSandboxCommand(argv)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNeedsFull, err)
	}
	TraceStage(l.Command + ": parsed")
	if err := a.SetupLogging(); err != nil {
		return fmt.Errorf("%w: %w", ErrNeedsFull, err)
	}
	dir, err := sandboxdir.Dir(a.DataDir, l.Name)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNeedsFull, err)
	}
	c, err := sandboxdir.Dial(dir)
	if err != nil {
		return fmt.Errorf("%w: sandbox %q: %w", ErrNeedsFull, l.Name, err)
	}
	conn := &agent.SandboxConn{C: c, Dir: dir}
	p := &dirSandbox{name: l.Name, dir: dir, first: conn}
	if l.Command != "cp" {
		// Exec checks the command rules in the spec: read it now, so
		// that a spec this binary cannot read goes to agentkernel-full
		// before the command is refused or audited here.
		if p.spec, err = sandboxdir.ReadSpec(dir, l.Name); err != nil {
			c.Close()
			return fmt.Errorf("%w: sandbox %q: %w", ErrNeedsFull, l.Name, err)
		}
	}
	defer p.close()
	TraceStage(l.Command + ": connected")
	// From here on the command is this binary's: warnings are printed as
	// they come.
	a.FlushWarnings()
	m := sandbox.NewManager(sandbox.ManagerOptions{
		Warn:      a.Warnf,
		Store:     p,
		Connector: p,
		Audit:     audit.New(a.DataDir),
		Who:       Who("cli"),
	})
	err = a.RunSandboxCommand(context.Background(), m, l)
	TraceStage(l.Command + ": done")
	if errors.Is(err, ErrNeedsFull) || errors.Is(err, sandbox.ErrSandboxNotFound) || errors.Is(err, sandbox.ErrNotRunning) {
		// Gone since it was dialled (said as agentkernel-full says it);
		// or, never, ErrNeedsFull once the command is under way: the
		// words only, so that nothing hands it to agentkernel-full now.
		return &ExitError{Code: ExitAgentkernel, Err: errors.New(err.Error())}
	}
	return err
}

// RunSandboxCommand runs the parsed command line l with m (both
// binaries). Errors that say the sandbox is unknown or stopped come back
// as they are, for the caller to word (agentkernel-full adds its hints).
func (a *App) RunSandboxCommand(ctx context.Context, m *sandbox.Manager, l *SandboxCommandLine) error {
	switch l.Command {
	case "exec":
		return a.RunExec(ctx, m, l.Name, l.Args, &l.Exec)
	case "attach":
		return a.RunAttach(ctx, m, l.Name, &l.Exec)
	case "cp":
		return a.RunCp(ctx, m, l.Args[0], l.Args[1])
	}
	return fmt.Errorf("%w: %s", ErrNeedsFull, l.Command)
}

// dirSandbox is the persistent part of the agentkernel binary's
// sandbox.Manager for one running sandbox: the connection and spec read
// from its directory (sandboxdir). Its first Connect hands out the
// connection made to find the sandbox; later ones dial again. What needs
// the state store fails with errNotLean (never asked by exec, attach or
// cp). None of its errors is ErrNeedsFull: once the command is under
// way, nothing hands it to agentkernel-full.
var errNotLean = errors.New("not available in the agentkernel binary (agentkernel-full has it)")

type dirSandbox struct {
	name, dir string
	spec      *sandbox.Spec

	mu    sync.Mutex
	first sandbox.Conn
}

var (
	_ sandbox.Store     = (*dirSandbox)(nil)
	_ sandbox.Connector = (*dirSandbox)(nil)
)

func (p *dirSandbox) Connect(_ context.Context, name string) (sandbox.Conn, error) {
	if name != p.name {
		return nil, fmt.Errorf("sandbox %q: %w", name, errNotLean)
	}
	p.mu.Lock()
	c := p.first
	p.first = nil
	p.mu.Unlock()
	if c != nil {
		return c, nil
	}
	cl, err := sandboxdir.Dial(p.dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w: %w", name, sandbox.ErrNotRunning, err)
	}
	return &agent.SandboxConn{C: cl, Dir: p.dir}, nil
}

func (p *dirSandbox) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.first != nil {
		p.first.Close()
		p.first = nil
	}
}

func (p *dirSandbox) Spec(_ context.Context, name string) (*sandbox.Spec, error) {
	if name != p.name || p.spec == nil {
		return nil, fmt.Errorf("the spec of sandbox %q: %w", name, errNotLean)
	}
	return p.spec, nil
}

func (p *dirSandbox) Create(context.Context, *sandbox.Info, *sandbox.Spec) error {
	return fmt.Errorf("create: %w", errNotLean)
}

func (p *dirSandbox) Get(context.Context, string) (*sandbox.Info, error) {
	return nil, fmt.Errorf("get: %w", errNotLean)
}

func (p *dirSandbox) List(context.Context) ([]*sandbox.Info, error) {
	return nil, fmt.Errorf("list: %w", errNotLean)
}

func (p *dirSandbox) Update(context.Context, string, func(*sandbox.Info) error) (*sandbox.Info, error) {
	return nil, fmt.Errorf("update: %w", errNotLean)
}

func (p *dirSandbox) Remove(context.Context, string, bool) error {
	return fmt.Errorf("remove: %w", errNotLean)
}

// RunExec is 'exec': args run in the sandbox called name with o's
// options; the command's exit status becomes this process's.
func (a *App) RunExec(ctx context.Context, m *sandbox.Manager, name string, args []string, o *ExecOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	req := sandbox.ExecRequest{Args: args, Workdir: o.Workdir, User: o.User, TTY: o.TTY}
	for _, kv := range o.Env {
		if !strings.Contains(kv, "=") {
			v, ok := os.LookupEnv(kv)
			if !ok {
				continue
			}
			kv += "=" + v
		}
		req.Env = append(req.Env, kv)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	defer signal.Stop(sigs)

	stdio := sandbox.Stdio{Stdout: a.Stdout, Stderr: a.Stderr}
	if o.Interactive {
		stdio.Stdin = a.Stdin
	}
	var ttyMaster, ttySlave *os.File
	if o.TTY {
		master, slave, err := pty.Open()
		if err != nil {
			return &ExitError{Code: ExitAgentkernel, Err: err}
		}
		defer master.Close()
		ttyMaster, ttySlave = master, slave
		if in, ok := a.Stdin.(*os.File); ok && term.IsTerminal(int(in.Fd())) {
			_ = pty.InheritSize(in, master)
			if st, err := term.MakeRaw(int(in.Fd())); err == nil {
				defer term.Restore(int(in.Fd()), st)
			}
			// The window's size follows ours: SIGWINCH → resize.
			winch := make(chan os.Signal, 1)
			signal.Notify(winch, unix.SIGWINCH)
			defer signal.Stop(winch)
			go func() {
				for range winch {
					_ = pty.InheritSize(in, master)
				}
			}()
		}
		stdio = sandbox.Stdio{Stdin: slave, Stdout: slave, Stderr: slave}
		defer slave.Close()
	}
	var copyDone sync.WaitGroup
	if ttyMaster != nil {
		if o.Interactive || a.Stdin != nil {
			go func() { _, _ = io.Copy(ttyMaster, a.Stdin) }()
		}
		copyDone.Add(1)
		go func() { defer copyDone.Done(); _, _ = io.Copy(a.Stdout, ttyMaster) }()
	}
	TraceStage("exec: request")
	res, err := m.Exec(ctx, name, req, stdio, sigs)
	if ttyMaster != nil {
		ttySlave.Close() // our copy: the master reads EOF (EIO) once the command's are gone
		copyDone.Wait()
	}
	if err != nil {
		if errors.Is(err, sandbox.ErrSandboxNotFound) || errors.Is(err, sandbox.ErrNotRunning) {
			return err
		}
		return RunError(err)
	}
	if res.ExitCode != 0 {
		return &ExitError{Code: res.ExitCode}
	}
	return nil
}

// RunAttach is 'attach': an interactive shell with a terminal (o.Shell,
// else /bin/bash when the sandbox has it, else /bin/sh).
func (a *App) RunAttach(ctx context.Context, m *sandbox.Manager, name string, o *ExecOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	shell := o.Shell
	if shell == "" {
		shell = "/bin/sh"
		c, err := m.Connect(ctx, name)
		if err != nil {
			return err
		}
		if fi, err := c.Stat(ctx, "/bin/bash"); err == nil && !fi.Mode.IsDir() {
			shell = "/bin/bash"
		}
		c.Close()
	}
	t := *o
	t.TTY, t.Interactive = true, true
	return a.RunExec(ctx, m, name, []string{shell}, &t)
}

package runcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/audit"
	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/envblock"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/sandboxdir"
)

// ExecuteSandboxCommand runs, in the agentkernel binary, the command line
// argv (without the program name) of 'exec', 'attach', 'cp' or 'stats'
// into running persistent sandboxes: ParseSandboxCommand, then the
// command, over a sandbox.Manager whose persistent parts are the
// sandboxes' directories alone (their sockets and spec.json: no state
// store). It answers ErrNeedsFull, before it has done anything the user
// can see, for every other command line, help, a command line
// ParseSandboxCommand refuses (agentkernel-full says why, in the same
// words), 'stats' without a NAME (only the state store knows every
// sandbox), and a sandbox it cannot reach or whose spec it cannot read
// (agentkernel-full's state store says whether it is unknown or
// stopped).
func (a *App) ExecuteSandboxCommand(argv []string) error {
	l, err := a.ParseSandboxCommand(argv)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNeedsFull, err)
	}
	if l.Exec.Receipt != "" {
		return fmt.Errorf("%w: --receipt", ErrNeedsFull)
	}
	if l.Exec.Record.On {
		return fmt.Errorf("%w: --record", ErrNeedsFull)
	}
	TraceStage(l.Command + ": parsed")
	names := []string{l.Name}
	if l.Command == "stats" {
		if len(l.Args) == 0 {
			return fmt.Errorf("%w: stats of every sandbox", ErrNeedsFull)
		}
		names = l.Args
	}
	if err := a.SetupLogging(); err != nil {
		return fmt.Errorf("%w: %w", ErrNeedsFull, err)
	}
	p := &dirSandboxes{dataDir: a.DataDir, byName: map[string]*dirSandbox{}}
	if l.Command == "stats" {
		// The sandboxes' figures as the host sees them (their cgroups),
		// read as agentkernel-full reads them.
		p.meter = native.New(native.Options{DataDir: a.DataDir})
	}
	for _, name := range names {
		if err := p.open(name, l.Command == "exec" || l.Command == "attach"); err != nil {
			p.close()
			return fmt.Errorf("%w: %w", ErrNeedsFull, err)
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
		HostStats: p,
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
	case "stats":
		return a.RunStats(ctx, m, l.Args, &l.Stats)
	}
	return fmt.Errorf("%w: %s", ErrNeedsFull, l.Command)
}

// dirSandboxes is the persistent part of the agentkernel binary's
// sandbox.Manager for the running sandboxes a command line names: the
// connections and specs read from their directories (sandboxdir). The
// first Connect to each hands out the connection made to find it; later
// ones dial again. Get answers a record of the name and the status
// "running" (its agent answered when it was found), all that Stats
// reads of one; what needs the state store fails with errNotLean (never
// asked by exec, attach, cp or stats of named sandboxes). None of its
// errors is ErrNeedsFull: once the command is under way, nothing hands it
// to agentkernel-full.
var errNotLean = errors.New("not available in the agentkernel binary (agentkernel-full has it)")

type dirSandboxes struct {
	dataDir string
	// meter is given to the connections (Usage), nil for none.
	meter sandbox.Meter

	mu     sync.Mutex
	byName map[string]*dirSandbox
}

// dirSandbox is one sandbox of a dirSandboxes.
type dirSandbox struct {
	dir   string
	spec  *sandbox.Spec
	first sandbox.Conn
}

var (
	_ sandbox.Store     = (*dirSandboxes)(nil)
	_ sandbox.Connector = (*dirSandboxes)(nil)
	_ sandbox.HostStats = (*dirSandboxes)(nil)
)

// open finds the running sandbox called name through its directory
// (and, withSpec, reads its spec: exec checks the command rules in it,
// so a spec this binary cannot read goes to agentkernel-full before the
// command is refused or audited here). A name given twice is found
// once.
func (p *dirSandboxes) open(name string, withSpec bool) error {
	if p.byName[name] != nil {
		return nil
	}
	dir, err := sandboxdir.Dir(p.dataDir, name)
	if err != nil {
		return err
	}
	c, err := sandboxdir.Dial(dir)
	if err != nil {
		return fmt.Errorf("sandbox %q: %w", name, err)
	}
	s := &dirSandbox{dir: dir, first: p.conn(c, dir)}
	p.byName[name] = s
	if withSpec {
		if s.spec, err = sandboxdir.ReadSpec(dir, name); err != nil {
			return fmt.Errorf("sandbox %q: %w", name, err)
		}
	}
	return nil
}

func (p *dirSandboxes) conn(c *agent.Client, dir string) sandbox.Conn {
	return &agent.SandboxConn{C: c, Dir: dir, Meter: p.meter}
}

func (p *dirSandboxes) lookup(name string) (*dirSandbox, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.byName[name]
	return s, ok
}

func (p *dirSandboxes) Connect(_ context.Context, name string) (sandbox.Conn, error) {
	s, ok := p.lookup(name)
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w", name, errNotLean)
	}
	p.mu.Lock()
	c := s.first
	s.first = nil
	p.mu.Unlock()
	if c != nil {
		return c, nil
	}
	cl, err := sandboxdir.Dial(s.dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w: %w", name, sandbox.ErrNotRunning, err)
	}
	return p.conn(cl, s.dir), nil
}

func (p *dirSandboxes) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.byName {
		if s.first != nil {
			s.first.Close()
			s.first = nil
		}
	}
}

func (p *dirSandboxes) Spec(_ context.Context, name string) (*sandbox.Spec, error) {
	s, ok := p.lookup(name)
	if !ok || s.spec == nil {
		return nil, fmt.Errorf("the spec of sandbox %q: %w", name, errNotLean)
	}
	return s.spec, nil
}

func (p *dirSandboxes) Get(_ context.Context, name string) (*sandbox.Info, error) {
	if _, ok := p.lookup(name); !ok {
		return nil, fmt.Errorf("sandbox %q: %w", name, errNotLean)
	}
	return &sandbox.Info{Name: name, Status: sandbox.StatusRunning}, nil
}

// Host is the host's totals, measured as agentkernel-full measures them.
func (p *dirSandboxes) Host(ctx context.Context) (sandbox.HostUsage, error) {
	return sandboxdir.Host(ctx, p.dataDir)
}

// DiskUsage is the size of the sandbox's writable layers, the root's
// and its copy-on-write volumes', as agentkernel-full counts them.
func (p *dirSandboxes) DiskUsage(_ context.Context, name string) (int64, error) {
	s, ok := p.lookup(name)
	if !ok {
		return 0, fmt.Errorf("sandbox %q: %w", name, errNotLean)
	}
	return sandboxdir.WritableBytes(s.dir), nil
}

func (p *dirSandboxes) Create(context.Context, *sandbox.Info, *sandbox.Spec) error {
	return fmt.Errorf("create: %w", errNotLean)
}

func (p *dirSandboxes) List(context.Context) ([]*sandbox.Info, error) {
	return nil, fmt.Errorf("list: %w", errNotLean)
}

func (p *dirSandboxes) Update(context.Context, string, func(*sandbox.Info) error) (*sandbox.Info, error) {
	return nil, fmt.Errorf("update: %w", errNotLean)
}

func (p *dirSandboxes) Remove(context.Context, string, bool) error {
	return fmt.Errorf("remove: %w", errNotLean)
}

// RunExec is 'exec': args run in the sandbox called name with o's
// options; the command's exit status becomes this process's.
func (a *App) RunExec(ctx context.Context, m *sandbox.Manager, name string, args []string, o *ExecOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if op := o.DetachedOp(); op != "" {
		return a.runDetachedOp(ctx, m, name, op, o)
	}
	if o.Receipt == "" || o.Detach || o.Output != nil {
		return a.runExec(ctx, m, name, args, o)
	}
	if err := a.prepareReceipt(o.Receipt); err != nil {
		return err
	}
	tee, err := NewOutputTee(a.Stdout, a.Stderr)
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	eo := *o
	eo.Output = tee
	runErr := a.runExec(ctx, m, name, args, &eo)
	if errors.Is(runErr, sandbox.ErrSandboxNotFound) || errors.Is(runErr, sandbox.ErrNotRunning) {
		// No command ran.
		tee.Close()
		return runErr
	}
	return a.issueReceipt(ReceiptRecord{File: o.Receipt, Exec: true, Name: name, Command: args, Env: o.Env, Workdir: o.Workdir, Sudo: o.Sudo}, tee, runErr)
}

// runExec is RunExec of a command, its output to o.Output when set.
func (a *App) runExec(ctx context.Context, m *sandbox.Manager, name string, args []string, o *ExecOptions) error {
	stdout, stderr := a.Stdout, a.Stderr
	if o.Output != nil {
		stdout, stderr = o.Output.Stdout(), o.Output.Stderr()
	}
	req := sandbox.ExecRequest{Args: args, Workdir: o.Workdir, User: o.User, TTY: o.TTY, Timeout: o.Timeout}
	rec := o.recording
	if rec != nil {
		req.Recording = rec.File()
	}
	if o.Sudo {
		req.User = "0:0"
	}
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
	if o.EnvStdin {
		env, restore, err := a.readEnvBlock()
		if err != nil {
			return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("exec --env-stdin: %w", err),
				Hint: "--env-stdin is for programs that write the environment as a block on stdin (such as the nomad backend); by hand use -e KEY=VALUE"}
		}
		defer restore()
		req.Env = append(req.Env, env...)
	}
	if o.Detach {
		d, err := m.ExecDetached(ctx, name, req)
		if err != nil {
			if errors.Is(err, sandbox.ErrSandboxNotFound) || errors.Is(err, sandbox.ErrNotRunning) {
				return err
			}
			return RunError(err)
		}
		return a.printDetached(o, d)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	defer signal.Stop(sigs)

	stdio := sandbox.Stdio{Stdout: stdout, Stderr: stderr}
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
		// This pty only carries bytes between us and the sandbox's own
		// terminal, whose line discipline is the one that counts: raw
		// from the start, so that nothing typed (or piped) before the
		// sandbox's side is bridged is echoed or taken here.
		_, _ = term.MakeRaw(int(slave.Fd()))
		if in, ok := a.Stdin.(*os.File); ok && term.IsTerminal(int(in.Fd())) {
			_ = pty.InheritSize(in, master)
			if st, err := term.MakeRaw(int(in.Fd())); err == nil {
				defer term.Restore(int(in.Fd()), st)
			}
			// The window's size follows ours: SIGWINCH → resize (and a
			// resize event in the recording).
			winch := make(chan os.Signal, 1)
			signal.Notify(winch, unix.SIGWINCH)
			defer signal.Stop(winch)
			// The size the recording starts with, read here and not in
			// the goroutine, which may first run after a resize.
			var last *pty.Winsize
			if rec != nil {
				last, _ = pty.GetsizeFull(in)
			}
			go func() {
				for range winch {
					_ = pty.InheritSize(in, master)
					if rec == nil {
						continue
					}
					if ws, err := pty.GetsizeFull(in); err == nil && ws.Cols > 0 && ws.Rows > 0 && (last == nil || ws.Cols != last.Cols || ws.Rows != last.Rows) {
						last = ws
						_ = rec.Resize(int(ws.Cols), int(ws.Rows))
					}
				}
			}()
		}
		stdio = sandbox.Stdio{Stdin: slave, Stdout: slave, Stderr: slave}
		defer slave.Close()
	}
	var copyDone sync.WaitGroup
	if ttyMaster != nil {
		if o.Interactive || a.Stdin != nil {
			in, ok := a.Stdin.(*os.File)
			var src io.Reader = a.Stdin
			if rec != nil && o.RecordInput {
				src = io.TeeReader(src, recordInput{rec})
			}
			go agent.CopyToPTY(ttyMaster, src, ok && term.IsTerminal(int(in.Fd())))
		}
		out := stdout
		if rec != nil {
			out = io.MultiWriter(stdout, recordOutput{rec})
		}
		copyDone.Add(1)
		go func() { defer copyDone.Done(); _, _ = io.Copy(out, ttyMaster) }()
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
	if res.TimedOut {
		return &ExitError{Code: 124, Err: fmt.Errorf("the command ran past --timeout %s and was killed", o.Timeout)}
	}
	if err := a.reportOOM(res, "the sandbox's limit is set when it is created (sandbox create --memory)"); err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return &ExitError{Code: res.ExitCode}
	}
	return nil
}

// readEnvBlock reads exec --env-stdin's block from a.Stdin, no byte
// more: what follows is the command's stdin. A terminal is made raw
// first (restore puts it back), and Ready written to a.Stdout once it is,
// since a terminal's line discipline would echo and edit the block's
// bytes: the writer waits for Ready before it sends the block.
func (a *App) readEnvBlock() (env []string, restore func(), err error) {
	restore = func() {}
	if a.Stdin == nil {
		return nil, restore, errors.New("no stdin to read the environment from")
	}
	if in, ok := a.Stdin.(*os.File); ok && term.IsTerminal(int(in.Fd())) {
		st, err := term.MakeRaw(int(in.Fd()))
		if err != nil {
			return nil, restore, fmt.Errorf("the terminal on stdin: %w", err)
		}
		restore = func() { _ = term.Restore(int(in.Fd()), st) }
		if _, err := io.WriteString(a.Stdout, envblock.Ready); err != nil {
			restore()
			return nil, func() {}, err
		}
	}
	env, err = envblock.Read(a.Stdin)
	if err != nil {
		restore()
		return nil, func() {}, err
	}
	return env, restore, nil
}

// printDetached prints a detached command: its ID alone (what -d
// prints, for scripts), or with --json the whole record.
func (a *App) printDetached(o *ExecOptions, d *sandbox.DetachedCommand) error {
	if o.JSON {
		return writeJSONTo(a.Stdout, d)
	}
	_, err := fmt.Fprintln(a.Stdout, d.ID)
	return err
}

func writeJSONTo(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// runDetachedOp is exec --list, --status, --logs or --kill.
func (a *App) runDetachedOp(ctx context.Context, m *sandbox.Manager, name, op string, o *ExecOptions) error {
	var err error
	switch op {
	case "list":
		var ds []sandbox.DetachedCommand
		if ds, err = m.DetachedList(ctx, name); err == nil {
			if o.JSON {
				return writeJSONTo(a.Stdout, ds)
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATUS\tEXIT\tSTARTED\tCOMMAND")
			for _, d := range ds {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.ID, d.Status, exitText(&d), d.StartedAt.Local().Format("2006-01-02 15:04:05"), strings.Join(d.Command, " "))
			}
			return tw.Flush()
		}
	case "status", "kill":
		var d *sandbox.DetachedCommand
		if op == "status" {
			d, err = m.DetachedStatus(ctx, name, o.Status)
		} else {
			d, err = m.DetachedKill(ctx, name, o.Kill)
		}
		if err == nil {
			if o.JSON {
				return writeJSONTo(a.Stdout, d)
			}
			line := d.Status
			if d.ExitCode != nil {
				line += fmt.Sprintf(" (exit code %d)", *d.ExitCode)
			}
			if d.Reason != "" {
				line += ": " + d.Reason
			}
			_, err = fmt.Fprintln(a.Stdout, line)
			return err
		}
	case "logs":
		stream := "stdout"
		if o.Stderr {
			stream = "stderr"
		}
		_, err = m.DetachedLogs(ctx, name, o.Logs, stream, o.Offset, a.Stdout)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sandbox.ErrSandboxNotFound), errors.Is(err, sandbox.ErrNotRunning):
		return err
	case errors.Is(err, sandbox.ErrDetachedNotFound):
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("sandbox %s has no detached command %s", name, firstOf(o.Status, o.Logs, o.Kill)),
			Hint: "'agentkernel exec --list " + name + "' lists them"}
	}
	return &ExitError{Code: ExitAgentkernel, Err: err}
}

func exitText(d *sandbox.DetachedCommand) string {
	if d.ExitCode == nil {
		return "-"
	}
	return fmt.Sprint(*d.ExitCode)
}

func firstOf(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// RunAttach is 'attach': an interactive shell with a terminal (o.Shell,
// else /bin/bash when the sandbox has it, else /bin/sh).
func (a *App) RunAttach(ctx context.Context, m *sandbox.Manager, name string, o *ExecOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.Record.On && a.Recorder == nil {
		return fmt.Errorf("%w: --record", ErrNeedsFull)
	}
	shell := o.Shell
	if shell == "" || o.Record.On {
		// A recording file is made only for a sandbox that runs.
		c, err := m.Connect(ctx, name)
		if err != nil {
			return err
		}
		if shell == "" {
			shell = "/bin/sh"
			if fi, err := c.Stat(ctx, "/bin/bash"); err == nil && !fi.Mode.IsDir() {
				shell = "/bin/bash"
			}
		}
		c.Close()
	}
	t := *o
	t.TTY, t.Interactive = true, true
	if !o.Record.On {
		return a.RunExec(ctx, m, name, []string{shell}, &t)
	}
	cols, rows := 80, 24
	if in, ok := a.Stdin.(*os.File); ok && term.IsTerminal(int(in.Fd())) {
		if ws, err := pty.GetsizeFull(in); err == nil && ws.Cols > 0 && ws.Rows > 0 {
			cols, rows = int(ws.Cols), int(ws.Rows)
		}
	}
	rec, err := a.Recorder.Start(RecordRequest{Sandbox: name, File: o.Record.File, Cols: cols, Rows: rows, Command: shell})
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err, Hint: "--record takes a .cast file that does not exist yet, or a directory"}
	}
	t.recording = rec
	runErr := a.RunExec(ctx, m, name, []string{shell}, &t)
	// The terminal is itself again: say where the recording is.
	if err := rec.Close(); err != nil {
		a.Warnf("the recording %s is incomplete: %v", rec.File(), err)
	} else if rec.Empty() {
		a.Infof("nothing to record: the session did not begin (no file written)")
	} else {
		a.Infof("recorded to %s (agentkernel replay %s)", rec.File(), rec.File())
	}
	return runErr
}

// recordOutput and recordInput pass a terminal's bytes to a recording;
// a failure to record never stops the session (the recording keeps its
// first error, which Close reports).
type recordOutput struct{ r TerminalRecording }
type recordInput struct{ r TerminalRecording }

func (w recordOutput) Write(p []byte) (int, error) { _ = w.r.Output(p); return len(p), nil }
func (w recordInput) Write(p []byte) (int, error)  { _ = w.r.Input(p); return len(p), nil }

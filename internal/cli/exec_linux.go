package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/creack/pty"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/supervisor"
)

func setCloexec(f *os.File) error {
	_, err := unix.FcntlInt(f.Fd(), unix.F_SETFD, unix.FD_CLOEXEC)
	return err
}

type execOptions struct {
	env         []string
	workdir     string
	user        string
	tty         bool
	interactive bool
}

func newExecCmd(a *App) *cobra.Command {
	var o execOptions
	cmd := &cobra.Command{
		Use:   "exec [flags] NAME [--] COMMAND [ARG...]",
		Short: "Run a command in a running sandbox",
		Long: `Run a command in a running persistent sandbox, with the same isolation as
'run': its own user namespace, dropped capabilities, no_new_privs, Landlock
and seccomp, inside the sandbox's cgroup. Without -i the command's stdin is
empty. Exit status: the command's own, 128+N on signal N, 125/126/127 as run.`,
		Example: `  agentkernel exec dev -- sh -c 'echo hi'
  echo data | agentkernel exec -i dev -- cat
  agentkernel exec -it dev -- sh`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			rest := args[1:]
			if rest[0] == "--" {
				rest = rest[1:]
			}
			if len(rest) == 0 {
				return usageError("exec: no command given")
			}
			return a.runExec(cmd.Context(), &o, args[0], rest)
		},
	}
	fs := cmd.Flags()
	fs.SetInterspersed(false)
	fs.StringArrayVarP(&o.env, "env", "e", nil, "set KEY=VALUE, or pass KEY's value from the host (repeatable)")
	fs.StringVarP(&o.workdir, "workdir", "w", "", "working directory (default: the sandbox's)")
	fs.StringVarP(&o.user, "user", "u", "", "run as NAME, UID or UID:GID")
	fs.BoolVarP(&o.tty, "tty", "t", false, "allocate a pseudo-terminal")
	fs.BoolVarP(&o.interactive, "interactive", "i", false, "pass stdin to the command")
	return cmd
}

// outFile returns w as a file the sandbox can write to directly, or a
// pipe copied into w (wait drains it).
func outFile(w io.Writer) (f *os.File, wait func(), err error) {
	if f, ok := w.(*os.File); ok {
		return f, func() {}, nil
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() { _, _ = io.Copy(w, r); r.Close(); close(done) }()
	return pw, func() { pw.Close(); <-done }, nil
}

func (a *App) runExec(ctx context.Context, o *execOptions, name string, args []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := validName(name); err != nil {
		return err
	}
	// The hot path: straight to the supervisor's socket, no state
	// database; only a failure opens it to say why.
	c, err := supervisor.Dial(filepath.Join(a.DataDir, "sandboxes", name, "sock"))
	if err != nil {
		lc, done, lerr := a.lifecycle(ctx)
		if lerr != nil {
			return lerr
		}
		defer done()
		if c, err = lc.Dial(ctx, name); err != nil {
			return sandboxError(name, err)
		}
	}
	defer c.Close()
	req := agent.ExecRequest{Args: args, Workdir: o.workdir, User: o.user, TTY: o.tty}
	for _, kv := range o.env {
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

	var stdin, stdout, stderr *os.File
	var waits []func()
	var ttyMaster *os.File
	if o.tty {
		master, slave, err := pty.Open()
		if err != nil {
			return &ExitError{Code: ExitAgentkernel, Err: err}
		}
		defer master.Close()
		ttyMaster = master
		if in, ok := a.Stdin.(*os.File); ok && term.IsTerminal(int(in.Fd())) {
			_ = pty.InheritSize(in, master)
			if st, err := term.MakeRaw(int(in.Fd())); err == nil {
				defer term.Restore(int(in.Fd()), st)
			}
			winch := make(chan os.Signal, 1)
			signal.Notify(winch, unix.SIGWINCH)
			defer signal.Stop(winch)
			go func() {
				for range winch {
					_ = pty.InheritSize(in, master)
				}
			}()
		}
		stdin, stdout, stderr = slave, slave, slave
		defer slave.Close()
	} else {
		if o.interactive {
			if f, ok := a.Stdin.(*os.File); ok {
				stdin = f
			} else {
				r, w, err := os.Pipe()
				if err != nil {
					return err
				}
				go func() { _, _ = io.Copy(w, a.Stdin); w.Close() }()
				defer r.Close()
				stdin = r
			}
		} else {
			n, err := os.Open(os.DevNull)
			if err != nil {
				return err
			}
			defer n.Close()
			stdin = n
		}
		var wait func()
		if stdout, wait, err = outFile(a.Stdout); err != nil {
			return err
		}
		waits = append(waits, wait)
		if stderr, wait, err = outFile(a.Stderr); err != nil {
			return err
		}
		waits = append(waits, wait)
	}
	var copyDone sync.WaitGroup
	if ttyMaster != nil {
		if o.interactive || a.Stdin != nil {
			go func() { _, _ = io.Copy(ttyMaster, a.Stdin) }()
		}
		copyDone.Add(1)
		go func() { defer copyDone.Done(); _, _ = io.Copy(a.Stdout, ttyMaster) }()
	}
	ws, err := c.Exec(ctx, req, stdin, stdout, stderr, sigs)
	if ttyMaster != nil {
		stdin.Close() // our copy of the slave: the master reads EOF (EIO) once the command's are gone
		copyDone.Wait()
	}
	for _, w := range waits {
		w()
	}
	if err != nil {
		return runError(err)
	}
	code := ws.ExitStatus()
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	if code != 0 {
		return &ExitError{Code: code}
	}
	return nil
}

// errno extracts the errno of an agent error, if any.
func errno(err error) syscall.Errno {
	var re interface{ Errno() syscall.Errno }
	if errors.As(err, &re) {
		return re.Errno()
	}
	return 0
}

func fileError(what string, err error) error {
	return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("%s: %w", what, err)}
}

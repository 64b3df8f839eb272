package cli

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
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/sandbox"
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
empty. Exit status: the command's own, 128+N on signal N, 125/126/127 as run.

[security.commands] applies as it does to run, with the rules the sandbox was
created with (a later change of agentkernel.toml does not change them): a
command they do not allow is not started, exit status 126. A sandbox created
by a version of agentkernel that did not record the rules has none, and each
exec warns about it.`,
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

func newAttachCmd(a *App) *cobra.Command {
	var shell, user, workdir string
	var env []string
	cmd := &cobra.Command{
		Use:   "attach [flags] NAME",
		Short: "Open an interactive shell in a running sandbox",
		Long: `Open an interactive shell with a terminal in a running sandbox: exec -it
NAME -- SHELL, where SHELL is --shell, else /bin/bash when the sandbox has
it, else /bin/sh. The terminal follows your window's size. Exit the shell
(exit, Ctrl-D) to detach; the sandbox keeps running. The sandbox's
[security.commands] rules apply to the shell as to any exec (exit status 126
when they do not allow it).`,
		Example: `  agentkernel attach dev
  agentkernel attach --shell /bin/ash -w /workspace dev`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runAttach(cmd.Context(), args[0], shell, &execOptions{env: env, workdir: workdir, user: user, tty: true, interactive: true})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&shell, "shell", "", "the shell to run (default: /bin/bash if present, else /bin/sh)")
	fs.StringArrayVarP(&env, "env", "e", nil, "set KEY=VALUE, or pass KEY's value from the host (repeatable)")
	fs.StringVarP(&workdir, "workdir", "w", "", "working directory (default: the sandbox's)")
	fs.StringVarP(&user, "user", "u", "", "run as NAME, UID or UID:GID")
	return cmd
}

func (a *App) runAttach(ctx context.Context, name, shell string, o *execOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := validName(name); err != nil {
		return err
	}
	if shell == "" {
		shell = "/bin/sh"
		m, done, err := a.sandboxes()
		if err != nil {
			return err
		}
		c, err := m.Connect(ctx, name)
		done()
		if err != nil {
			return sandboxError(name, err)
		}
		if fi, err := c.Stat(ctx, "/bin/bash"); err == nil && !fi.Mode.IsDir() {
			shell = "/bin/bash"
		}
		c.Close()
	}
	return a.runExec(ctx, o, name, []string{shell})
}

func (a *App) runExec(ctx context.Context, o *execOptions, name string, args []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := validName(name); err != nil {
		return err
	}
	m, done, err := a.sandboxes()
	if err != nil {
		return err
	}
	defer done()
	req := sandbox.ExecRequest{Args: args, Workdir: o.workdir, User: o.user, TTY: o.tty}
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

	stdio := sandbox.Stdio{Stdout: a.Stdout, Stderr: a.Stderr}
	if o.interactive {
		stdio.Stdin = a.Stdin
	}
	var ttyMaster, ttySlave *os.File
	if o.tty {
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
		if o.interactive || a.Stdin != nil {
			go func() { _, _ = io.Copy(ttyMaster, a.Stdin) }()
		}
		copyDone.Add(1)
		go func() { defer copyDone.Done(); _, _ = io.Copy(a.Stdout, ttyMaster) }()
	}
	res, err := m.Exec(ctx, name, req, stdio, sigs)
	if ttyMaster != nil {
		ttySlave.Close() // our copy: the master reads EOF (EIO) once the command's are gone
		copyDone.Wait()
	}
	if err != nil {
		if errors.Is(err, sandbox.ErrSandboxNotFound) || errors.Is(err, sandbox.ErrNotRunning) {
			return sandboxError(name, err)
		}
		return runcli.RunError(err)
	}
	if res.ExitCode != 0 {
		return &ExitError{Code: res.ExitCode}
	}
	return nil
}

func fileError(what string, err error) error {
	return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("%s: %w", what, err)}
}

package cli

import (
	"errors"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

func setCloexec(f *os.File) error {
	_, err := unix.FcntlInt(f.Fd(), unix.F_SETFD, unix.FD_CLOEXEC)
	return err
}

func newExecCmd(a *App) *cobra.Command {
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
exec warns about it.

--env, --workdir and --user set the command's environment, working
directory and identity. --sudo runs it as root (uid and gid 0) inside the
sandbox: root of the sandbox's own user namespace, an unprivileged id on the
host, with the capabilities the sandbox's profile keeps and no more; it is
--user 0:0. --timeout DUR kills the command once it has run
that long: exit status 124 and a line saying so. When exec itself is killed
(kill -9) or loses its connection to the sandbox, the command it started is
killed too, and the audit log says so ("client gone").

--env-stdin is for programs that pipe the environment, such as the nomad
backend, so that no value appears on a command line (which every user of the
machine can read): exec reads one block from the beginning of stdin,
"AKENV1\0", a 4-byte big-endian length, then NUL-ended KEY=VALUE entries (at
most 1 MiB), and no byte more; the rest of stdin is the command's (with -i).
Anything else is refused, exit status 125. When stdin is a terminal, exec
makes it raw and writes the marker ESC ]5379;agentkernel-env-ready BEL
before it reads: send the block after it.

-d runs the command detached: exec prints its ID and returns while the
command runs on, owned by the sandbox's supervisor, until it ends, is killed
or the sandbox stops. Its stdin is empty; its stdout and stderr are kept
under the sandbox's directory (detached/ID/), 16 MiB each: past that,
writing stops with a line saying so and the rest is dropped. At most 64
run at once in one sandbox (the next is refused until one ends); the newest
64 ended commands are kept, with their output. Then:
  exec --list NAME                            its detached commands
  exec --status ID NAME                       running, completed or failed (exit code)
  exec --logs ID [--stderr] [--offset N] NAME its output, from byte N
  exec --kill ID NAME                         SIGKILL; its status once it has ended
--json prints -d's, --list's, --status's and --kill's answers as JSON.`,
		Example: `  agentkernel exec dev -- sh -c 'echo hi'
  echo data | agentkernel exec -i dev -- cat
  agentkernel exec -it dev -- sh
  agentkernel exec -e DEBUG=1 -w /workspace --timeout 5m dev -- make test
  id=$(agentkernel exec -d dev -- npm run dev)
  agentkernel exec --logs "$id" dev; agentkernel exec --kill "$id" dev`,
		Args:               cobra.ArbitraryArgs,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runSandboxCommand(cmd, args)
		},
	}
	// Bound for help and completion only: runcli.ParseSandboxCommand
	// reads the command line.
	cmd.Flags().SetInterspersed(false)
	runcli.BindExecFlags(cmd.Flags(), &runcli.ExecOptions{})
	return leanParsed(cmd)
}

func newAttachCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "attach [flags] NAME",
		Short: "Open an interactive shell in a running sandbox",
		Long: `Open an interactive shell with a terminal in a running sandbox: exec -it
NAME -- SHELL, where SHELL is --shell, else /bin/bash when the sandbox has
it, else /bin/sh. The terminal follows your window's size. Exit the shell
(exit, Ctrl-D) to detach; the sandbox keeps running. The sandbox's
[security.commands] rules apply to the shell as to any exec (exit status 126
when they do not allow it).

--record [FILE] records the session as an asciicast v2 file: what the
terminal shows, with its timing, the window's size and each resize. FILE
is a .cast file (never written over: name one that does not exist), or a
directory; without FILE the recording goes to
<data-dir>/recordings/NAME-YYYYMMDD-HHMMSS.cast (UTC). Keystrokes are
recorded only with --record-input (they include whatever is typed at a
password prompt that does not echo). The file is private to you (0600);
its path is printed when the session ends and written to the audit log's
entry of the session. 'agentkernel replay FILE' plays it back, and so does
asciinema.`,
		Example: `  agentkernel attach dev
  agentkernel attach --shell /bin/ash -w /workspace dev
  agentkernel attach --record dev
  agentkernel attach --record session.cast --record-input dev
  agentkernel replay session.cast`,
		Args:               cobra.ArbitraryArgs,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runSandboxCommand(cmd, args)
		},
	}
	runcli.BindAttachFlags(cmd.Flags(), &runcli.ExecOptions{})
	return leanParsed(cmd)
}

// leanParsed finishes a command whose command line
// runcli.ParseSandboxCommand reads (cobra does not parse it): its flags
// are bound for help and completion only, --help among them as cobra
// binds it.
func leanParsed(cmd *cobra.Command) *cobra.Command {
	cmd.Flags().BoolP("help", "h", false, "help for "+cmd.Name())
	return cmd
}

// runSandboxCommand runs exec, attach, cp or stats (cmd) with args, the command
// line after the command's name, as the agentkernel binary runs them
// (runcli.ParseSandboxCommand, runcli's App.RunSandboxCommand), with the
// whole state store behind the Manager.
func (a *App) runSandboxCommand(cmd *cobra.Command, args []string) error {
	l, err := a.ParseSandboxCommand(append([]string{cmd.Name()}, args...))
	switch {
	case errors.Is(err, runcli.ErrCommandHelp):
		return cmd.Help()
	case err != nil:
		return err
	}
	if err := a.SetupLogging(); err != nil {
		return err
	}
	m, done, err := a.sandboxes()
	if err != nil {
		return err
	}
	defer done()
	ctx := cmdContext(cmd)
	err = a.RunSandboxCommand(ctx, m, l)
	if errors.Is(err, sandbox.ErrSandboxNotFound) || errors.Is(err, sandbox.ErrNotRunning) {
		name := l.Name
		if ne := (*sandbox.NameError)(nil); errors.As(err, &ne) {
			name = ne.Name // stats of several: the one it failed on
		}
		return sandboxError(name, err)
	}
	return err
}

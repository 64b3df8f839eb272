package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/creack/pty"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/sshd"
	"github.com/agentkernel/agentkernel/internal/supervisor"
)

const sshLong = `SSH into a persistent sandbox created with --ssh, with OpenSSH's own
ssh, scp and sftp, or an IDE's remote mode.

The sandbox's supervisor serves SSH itself on 127.0.0.1 (the image needs no
sshd): a shell or a command runs in the sandbox as its user, under its
command rules and in its audit log, as 'agentkernel exec' does; sftp (and
scp) reach the sandbox's files only, below its root; ssh -L forwards to
ports of the sandbox's own loopback only.

Nothing but a certificate logs in: each sandbox has its own certificate
authority and host key, kept in its directory (<data-dir>/sandboxes/NAME/ssh,
private to you). 'ssh connect' and 'ssh config' make a fresh client key and
a certificate for it, valid for 30 minutes, and pin the sandbox's host key
(StrictHostKeyChecking yes). Each connection is audited (ssh_connected,
ssh_disconnected; 'agentkernel audit NAME').`

func newSSHCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ssh",
		Short: "SSH into a persistent sandbox (created with --ssh): connect, or config for IDEs",
		Long:  sshLong,
		Example: `  agentkernel sandbox create dev --ssh --start
  agentkernel ssh connect dev
  agentkernel ssh connect dev -- uname -a
  agentkernel ssh config dev >> ~/.ssh/config && ssh agentkernel-dev
  scp ./file agentkernel-dev:/tmp/     # after 'ssh config'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newSSHConnectCmd(a), newSSHConfigCmd(a))
	for _, c := range cmd.Commands() {
		c.ValidArgsFunction = a.completeFirstSandboxName(1)
	}
	return cmd
}

func newSSHConnectCmd(a *App) *cobra.Command {
	var print bool
	var record string
	cmd := &cobra.Command{
		Use:   "connect NAME [-- COMMAND...]",
		Short: "Open a shell (or run COMMAND) in the sandbox over SSH",
		Long: `Open a shell in the sandbox NAME over SSH, or run COMMAND there, with
OpenSSH's ssh: a new client key and a 30-minute certificate are made for
this connection (and removed after it), and the sandbox's host key is
pinned. The exit code is the command's (255: ssh itself failed).

--print, or when ssh is not installed, prints the ssh command line instead,
with a key and certificate that stay valid for 30 minutes.

--record FILE.cast records the session's terminal as asciicast v2 (ssh then
runs in a terminal of its own; COMMAND gets a terminal too); a directory
names where the file goes (<sandbox>-<time>.cast). 'agentkernel replay
FILE.cast' plays it back; the connection's ssh_disconnected audit entry
names the file.`,
		Example: `  agentkernel ssh connect dev
  agentkernel ssh connect dev -- make test
  agentkernel ssh connect dev --print
  agentkernel ssh connect dev --record session.cast`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() > 1 || (cmd.ArgsLenAtDash() < 0 && len(args) > 1) {
				return usageError("give the command after --: agentkernel ssh connect NAME -- COMMAND...")
			}
			if cmd.Flags().Changed("record") && record == "" {
				return usageError("--record needs a file: --record FILE.cast")
			}
			if print && record != "" {
				return usageError("--print and --record: choose one (--record runs ssh)")
			}
			return a.sshConnect(cmd.Context(), args[0], args[1:], print, record)
		},
	}
	cmd.Flags().BoolVar(&print, "print", false, "print the ssh command line instead of running it")
	cmd.Flags().StringVar(&record, "record", "", "record the terminal to FILE.cast (asciicast v2; a directory: a new file in it)")
	return cmd
}

func newSSHConfigCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "config NAME",
		Short: "Print an ssh_config Host block for the sandbox (IDEs, scp, sftp)",
		Long: `Print an ssh_config Host block, agentkernel-NAME, that reaches the sandbox
NAME: its port on 127.0.0.1, its user, a client key with a new 30-minute
certificate (made now; run this again to renew it) and its pinned host key.
Add it to ~/.ssh/config (or Include a file holding it) and use
'ssh agentkernel-NAME', scp, sftp or an IDE's remote mode with that name.`,
		Example: `  agentkernel ssh config dev > ~/.ssh/agentkernel-dev.conf
  echo 'Include ~/.ssh/agentkernel-dev.conf' >> ~/.ssh/config
  ssh agentkernel-dev -L 8080:localhost:8080`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.sshConfig(cmd.Context(), args[0])
		},
	}
}

// sshTarget is where the sandbox name's SSH server is: its ssh
// directory, login user and port. An unknown or stopped sandbox, or one
// created without --ssh, is refused with what to do.
type sshTarget struct {
	name, dir, user string
	port            int
}

func (a *App) sshTarget(ctx context.Context, name string) (*sshTarget, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := validName(name); err != nil {
		return nil, err
	}
	m, done, err := a.sandboxes()
	if err != nil {
		return nil, err
	}
	defer done()
	info, err := m.Get(ctx, name)
	if err != nil {
		return nil, sandboxError(name, err)
	}
	sv := &supervisor.Manager{DataDir: a.DataDir}
	spec, err := sv.Spec(ctx, name)
	if err != nil {
		return nil, sandboxError(name, err)
	}
	if spec.SSH == nil {
		return nil, &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("sandbox %q was created without --ssh", name),
			Hint: "SSH is chosen when a sandbox is created: 'agentkernel sandbox create NAME --ssh' (or use 'agentkernel exec " + name + "')"}
	}
	if info.Status != sandbox.StatusRunning {
		return nil, sandboxError(name, sandbox.ErrNotRunning)
	}
	t := &sshTarget{name: name, dir: sshd.Dir(sv.Dir(name)), user: spec.SSH.User}
	if t.user == "" {
		t.user = sshd.DefaultUser
	}
	if t.port, err = sshd.Port(t.dir); err != nil {
		return nil, &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("sandbox %q: its SSH port is not recorded: %w", name, err),
			Hint: "restart it: 'agentkernel sandbox restart " + name + "'"}
	}
	return t, nil
}

// sshArgs is the ssh command line (without the program) for t with the
// client key at key.
func (t *sshTarget) sshArgs(key string) []string {
	return []string{
		"-i", key,
		"-o", "CertificateFile=" + sshd.CertPath(key),
		"-o", "IdentitiesOnly=yes",
		"-o", "UserKnownHostsFile=" + sshd.KnownHostsPath(t.dir),
		"-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "StrictHostKeyChecking=yes",
		"-o", "HostKeyAlias=" + sshd.HostAlias(t.name),
		"-o", "PasswordAuthentication=no",
		"-o", "KbdInteractiveAuthentication=no",
		"-p", strconv.Itoa(t.port),
		t.user + "@127.0.0.1",
	}
}

func (a *App) sshConnect(ctx context.Context, name string, command []string, print bool, record string) error {
	t, err := a.sshTarget(ctx, name)
	if err != nil {
		return err
	}
	sshBin, lookErr := exec.LookPath("ssh")
	if print || lookErr != nil {
		key := filepath.Join(t.dir, sshd.ClientKey)
		if _, err := sshd.IssueClientKey(t.dir, key, t.user, sshd.CertTTL); err != nil {
			return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("ssh: a client certificate: %w", err)}
		}
		line := []string{"ssh"}
		for _, s := range t.sshArgs(key) {
			line = append(line, shellQuote(s))
		}
		if len(command) > 0 {
			line = append(line, "--")
			for _, c := range command {
				line = append(line, shellQuote(shellQuote(c)))
			}
		}
		if lookErr != nil && !print {
			a.Warnf("ssh is not installed (OpenSSH's client, e.g. apt install openssh-client): run this command where it is")
		}
		_, err := fmt.Fprintln(a.Stdout, strings.Join(line, " "))
		return err
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	key := filepath.Join(t.dir, "connect-"+hex.EncodeToString(rnd[:]))
	if _, err := sshd.IssueClientKey(t.dir, key, t.user, sshd.CertTTL); err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("ssh: a client certificate: %w", err)}
	}
	defer sshd.RemoveClientKey(key)
	args := append([]string{"-o", "LogLevel=ERROR"}, t.sshArgs(key)...)
	if len(command) > 0 {
		quoted := make([]string, len(command))
		for i, c := range command {
			quoted[i] = shellQuote(c)
		}
		args = append(args, "--", strings.Join(quoted, " "))
	}
	if record != "" {
		return a.sshRecorded(name, sshBin, args, command, record)
	}
	c := exec.Command(sshBin, args...)
	c.Stdin, c.Stdout, c.Stderr = a.Stdin, a.Stdout, a.Stderr
	err = c.Run()
	return sshExit(err)
}

// sshExit passes ssh's exit code on.
func sshExit(err error) error {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		return &ExitError{Code: ee.ExitCode()}
	}
	return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("running ssh: %w", err)}
}

// sshRecorded runs ssh (args) in a terminal of its own and records what
// it shows to record (asciicast v2, runcli's recorder): the caller's
// terminal is raw meanwhile, its size followed. The recording's file is
// sent to the server for the connection's audit entry.
func (a *App) sshRecorded(name, sshBin string, args, command []string, record string) error {
	cols, rows := 80, 24
	in, inFile := a.Stdin.(*os.File)
	isTerm := inFile && term.IsTerminal(int(in.Fd()))
	if isTerm {
		if ws, err := pty.GetsizeFull(in); err == nil && ws.Cols > 0 && ws.Rows > 0 {
			cols, rows = int(ws.Cols), int(ws.Rows)
		}
	}
	what := "ssh " + sshd.HostAlias(name)
	if len(command) > 0 {
		what = strings.Join(command, " ")
	}
	rec, err := a.Recorder.Start(runcli.RecordRequest{Sandbox: name, File: record, Cols: cols, Rows: rows, Command: what})
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err, Hint: "--record takes a .cast file that does not exist yet, or a directory"}
	}
	// The options go before the destination, which is args' last word
	// before any command.
	dest := len(args) - 1
	if len(command) > 0 {
		dest = len(args) - 3
	}
	full := append(append([]string{}, args[:dest]...), "-t", "-o", "SetEnv="+sshd.RecordingEnv+"="+rec.File())
	full = append(full, args[dest:]...)
	c := exec.Command(sshBin, full...)
	master, err := pty.StartWithSize(c, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
	if err != nil {
		rec.Close()
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("running ssh: %w", err)}
	}
	defer master.Close()
	if isTerm {
		if st, err := term.MakeRaw(int(in.Fd())); err == nil {
			defer term.Restore(int(in.Fd()), st)
		}
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, unix.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for range winch {
				if ws, err := pty.GetsizeFull(in); err == nil {
					_ = pty.Setsize(master, ws)
					_ = rec.Resize(int(ws.Cols), int(ws.Rows))
				}
			}
		}()
	}
	if a.Stdin != nil {
		go agent.CopyToPTY(master, a.Stdin, isTerm)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(io.MultiWriter(a.Stdout, castOutput{rec}), master)
	}()
	err = c.Wait()
	<-copied
	if cerr := rec.Close(); cerr != nil {
		a.Warnf("the recording %s is incomplete: %v", rec.File(), cerr)
	} else {
		a.Infof("recorded to %s (agentkernel replay %s)", rec.File(), rec.File())
	}
	return sshExit(err)
}

// castOutput passes a terminal's output to a recording; a failure to
// record never stops the session (Close reports it).
type castOutput struct{ r runcli.TerminalRecording }

func (w castOutput) Write(p []byte) (int, error) { _ = w.r.Output(p); return len(p), nil }

func (a *App) sshConfig(ctx context.Context, name string) error {
	t, err := a.sshTarget(ctx, name)
	if err != nil {
		return err
	}
	key := filepath.Join(t.dir, sshd.ClientKey)
	if _, err := sshd.IssueClientKey(t.dir, key, t.user, sshd.CertTTL); err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("ssh: a client certificate: %w", err)}
	}
	q := func(s string) string {
		if strings.ContainsAny(s, " \t\"") {
			return `"` + s + `"`
		}
		return s
	}
	alias := sshd.HostAlias(name)
	_, err = fmt.Fprintf(a.Stdout, `# agentkernel sandbox %s: certificate valid until %s; run 'agentkernel ssh config %s' to renew it
Host %s
  HostName 127.0.0.1
  Port %d
  User %s
  IdentityFile %s
  CertificateFile %s
  IdentitiesOnly yes
  UserKnownHostsFile %s
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  HostKeyAlias %s
  PasswordAuthentication no
  KbdInteractiveAuthentication no
`, name, time.Now().Add(sshd.CertTTL).Format("15:04 MST"), name, alias, t.port, t.user, q(key), q(sshd.CertPath(key)),
		q(sshd.KnownHostsPath(t.dir)), alias)
	return err
}

// validSSHUser checks --ssh-user: a login name OpenSSH will send as is.
func validSSHUser(u string) error {
	if u == "" || len(u) > 32 || strings.Trim(u, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "" || u[0] == '-' {
		return usageError("--ssh-user %q: use letters, digits, '-', '_' or '.' (at most 32, not starting with '-')", u)
	}
	return nil
}

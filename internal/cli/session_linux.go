package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

const sessionLong = `Named agent sessions: a persistent sandbox called session-NAME kept for one
coding agent, with a little metadata (agent, status, the last snapshot)
in <data-dir>/sessions/NAME.json.

'session start' creates and starts the sandbox (the flags of 'sandbox
create': image, profile, limits, --dir). The agent picks the compatibility
mode unless --mode is given: claude, codex and gemini their own (project
read-write, the agent's API reachable); any other agent (opencode, …) the
configuration's mode, native by default.

'session save' snapshots the sandbox (see 'agentkernel snapshot --help';
default name NAME-YYYYMMDD-HHMMSS, UTC) and marks the session saved; the
sandbox goes on as it was. 'session stop' stops the sandbox. 'session
resume' starts it again; a sandbox that was removed is first restored from
the session's last snapshot, with the files as they were at the save.
'session delete' removes the session's metadata only: its snapshots are
kept, and its sandbox too unless --with-sandbox.

'session list' shows each session's agent, status (running, stopped,
saved), age and how many commands ran in it ('exec', counted from the
audit log), the most recently used first. A running session whose
sandbox stopped is shown stopped.

Session names follow the sandbox names' rule, at most 55 characters.`

// newSessionCmd is the "session" group.
func newSessionCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "session",
		Aliases: []string{"sessions"},
		Short:   "Start, list, stop, save, resume and delete named agent sessions",
		Long:    sessionLong,
		Example: `  agentkernel session start --name fix-login --agent claude --image node:22
  agentkernel exec session-fix-login -- npm test
  agentkernel session save fix-login
  agentkernel session resume fix-login
  agentkernel session list`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newSessionStartCmd(a), newSessionListCmd(a), newSessionStopCmd(a), newSessionSaveCmd(a),
		newSessionResumeCmd(a), newSessionDeleteCmd(a))
	return cmd
}

// sessions returns the sessions of the data directory over the
// persistent-sandbox Manager; done releases the state store.
func (a *App) sessions() (*sandbox.Sessions, func(), error) {
	m, done, err := a.sandboxes()
	if err != nil {
		return nil, nil, err
	}
	return &sandbox.Sessions{Dir: filepath.Join(a.DataDir, "sessions"), M: m}, done, nil
}

// sessionError maps session errors to exit codes and hints; snapshot
// and sandbox errors go through snapshotError.
func sessionError(name, snap string, err error) error {
	var ee *ExitError
	sb := sandbox.SessionSandbox(name)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		return err
	case errors.Is(err, sandbox.ErrSessionNotFound):
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("session %q not found", name), Hint: "see 'agentkernel session list'"}
	case errors.Is(err, sandbox.ErrSessionExists):
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("Session '%s' already exists. Use 'session resume' or 'session delete' first.", name)}
	case errors.Is(err, sandbox.ErrSessionGone):
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("session %q: its sandbox %s was removed and the session was never saved: nothing to resume from", name, sb),
			Hint: "start it anew: 'agentkernel session delete " + name + "', then 'agentkernel session start --name " + name + " …'"}
	case errors.Is(err, sandbox.ErrSandboxExists):
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("sandbox %q already exists and is not a session's", sb),
			Hint: "remove it with 'agentkernel sandbox rm " + sb + "', or choose another session name"}
	case errors.Is(err, sandbox.ErrSnapshotNotFound), errors.Is(err, sandbox.ErrSnapshotExists):
		return snapshotError(snap, sb, err)
	case errors.Is(err, sandbox.ErrSandboxNotFound), errors.Is(err, sandbox.ErrNotRunning), errors.Is(err, sandbox.ErrRunning):
		return sandboxError(sb, err)
	}
	return imageError(err)
}

func newSessionStartCmd(a *App) *cobra.Command {
	var (
		o       createOptions
		name    string
		agent   string
		backend string
	)
	cmd := &cobra.Command{
		Use:   "start --name NAME --agent AGENT [flags]",
		Short: "Create and start a session's sandbox (session-NAME)",
		Example: `  agentkernel session start --name fix-login --agent claude
  agentkernel session start --name spike --agent opencode --image python:3.12 -p permissive`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if name == "" {
				return usageError("session start: --name is required")
			}
			if err := sandbox.ValidateSessionName(name); err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: err}
			}
			if err := sandbox.ValidateSessionAgent(agent); err != nil {
				return usageError("%v", err)
			}
			o.overrides.Set = runcli.ChangedFlags(cmd.Flags())
			if !o.overrides.Set["mode"] {
				// The agent picks the mode where it has one.
				if mode, err := config.ParseMode(agent); err == nil && mode != config.ModeNative {
					o.overrides.Mode = mode
					o.overrides.Set["mode"] = true
				}
			}
			s, done, err := a.sessions()
			if err != nil {
				return err
			}
			defer done()
			if backend != "" {
				if _, err := s.M.Backend(backend); err != nil {
					return &ExitError{Code: ExitAgentkernel, Err: err}
				}
			}
			sb, req, err := a.resolveCreate(sandbox.SessionSandbox(name), &o)
			if err != nil {
				return err
			}
			ses, err := s.Start(cmdContext(cmd), sandbox.StartSession{Name: name, Agent: agent, Create: *req})
			if err != nil {
				return sessionError(name, "", err)
			}
			fmt.Fprintf(a.Stdout, "Session '%s' started.\n  Sandbox: %s\nAttach with: agentkernel attach %s\n", ses.Name, sb, sb)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&name, "name", "", "the session's name (required; its sandbox is session-NAME)")
	fs.StringVar(&agent, "agent", "", "the agent it is for: claude, codex, gemini, opencode, … (required)")
	fs.StringVarP(&backend, "backend", "B", "", "sandbox backend (native)")
	runcli.BindSpecFlags(fs, &o.overrides)
	for _, n := range []string{"tty", "interactive", "timeout", "keep", "pull"} {
		_ = fs.MarkHidden(n)
	}
	fs.StringVar(&o.dir, "dir", "", "project directory (default: the current directory)")
	_ = cmd.MarkFlagRequired("agent")
	return cmd
}

// FormatSessionDuration is list's DURATION: Ns, Nm, Nh Mm, Nd.
func FormatSessionDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

func newSessionListCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List sessions, the most recently used first",
		Example: "  agentkernel session list --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, done, err := a.sessions()
			if err != nil {
				return err
			}
			defer done()
			out, err := s.List(cmdContext(cmd))
			if err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: err}
			}
			if asJSON {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tAGENT\tSTATUS\tDURATION\tEXECS")
			now := time.Now()
			for _, x := range out {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", x.Name, x.Agent, x.Status, FormatSessionDuration(now.Sub(x.CreatedAt)), x.ExecCount)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// sessionCmd is a command over one session: NAME checked, the sessions
// opened, run called, its error mapped.
func sessionCmd(a *App, use, short, example string, run func(cmd *cobra.Command, s *sandbox.Sessions, name string) error) *cobra.Command {
	return &cobra.Command{
		Use:               use + " NAME",
		Short:             short,
		Example:           example,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeSessionName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := sandbox.ValidateSessionName(args[0]); err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: err}
			}
			s, done, err := a.sessions()
			if err != nil {
				return err
			}
			defer done()
			return run(cmd, s, args[0])
		},
	}
}

func newSessionStopCmd(a *App) *cobra.Command {
	return sessionCmd(a, "stop", "Stop a session's sandbox (its files stay)", "  agentkernel session stop fix-login",
		func(cmd *cobra.Command, s *sandbox.Sessions, name string) error {
			if _, err := s.Stop(cmdContext(cmd), name); err != nil {
				return sessionError(name, "", err)
			}
			fmt.Fprintf(a.Stdout, "Session '%s' stopped.\n", name)
			return nil
		})
}

func newSessionSaveCmd(a *App) *cobra.Command {
	var snap string
	cmd := sessionCmd(a, "save", "Snapshot a session's sandbox; the session is saved",
		"  agentkernel session save fix-login\n  agentkernel session save fix-login --snapshot fix-login-green",
		func(cmd *cobra.Command, s *sandbox.Sessions, name string) error {
			end := a.working("saving session " + name)
			_, sn, err := s.Save(cmdContext(cmd), name, snap)
			end()
			if err != nil {
				if snap == "" {
					snap = "(default)"
				}
				return sessionError(name, snap, err)
			}
			fmt.Fprintf(a.Stdout, "Session '%s' saved (snapshot: %s)\n", name, sn.Name)
			return nil
		})
	cmd.Flags().StringVar(&snap, "snapshot", "", "the snapshot's name (default NAME-YYYYMMDD-HHMMSS, UTC)")
	return cmd
}

func newSessionResumeCmd(a *App) *cobra.Command {
	return sessionCmd(a, "resume", "Start a session's sandbox again (restored from its snapshot if it was removed)",
		"  agentkernel session resume fix-login",
		func(cmd *cobra.Command, s *sandbox.Sessions, name string) error {
			ses, restored, err := s.Resume(cmdContext(cmd), name)
			if err != nil {
				snap := ""
				if cur, gerr := s.Get(cmdContext(cmd), name); gerr == nil && cur.Snapshot != nil {
					snap = *cur.Snapshot
				}
				return sessionError(name, snap, err)
			}
			fmt.Fprintf(a.Stdout, "Session '%s' resumed.\n", name)
			if restored {
				fmt.Fprintf(a.Stdout, "  Restored from snapshot: %s\n", *ses.Snapshot)
			}
			fmt.Fprintf(a.Stdout, "Attach with: agentkernel attach %s\n", ses.Sandbox)
			return nil
		})
}

func newSessionDeleteCmd(a *App) *cobra.Command {
	var withSandbox bool
	cmd := sessionCmd(a, "delete", "Delete a session's metadata (its snapshots are kept)",
		"  agentkernel session delete fix-login\n  agentkernel session delete fix-login --with-sandbox",
		func(cmd *cobra.Command, s *sandbox.Sessions, name string) error {
			ses, err := s.Delete(cmdContext(cmd), name, withSandbox)
			if err != nil {
				return sessionError(name, "", err)
			}
			fmt.Fprintf(a.Stdout, "Session '%s' deleted.\n", name)
			if withSandbox {
				fmt.Fprintf(a.Stdout, "  Sandbox %s removed.\n", ses.Sandbox)
			} else {
				fmt.Fprintf(a.Stdout, "  Sandbox %s kept (remove it with 'agentkernel sandbox rm --force %s').\n", ses.Sandbox, ses.Sandbox)
			}
			fmt.Fprintln(a.Stdout, "  Snapshots kept (see 'agentkernel snapshot list').")
			return nil
		})
	cmd.Aliases = []string{"rm", "remove"}
	cmd.Flags().BoolVar(&withSandbox, "with-sandbox", false, "remove the session's sandbox too (stopped first)")
	return cmd
}

// completeSessionName completes a command's one argument with the names
// of the data directory's sessions (their metadata files).
func (a *App) completeSessionName(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return a.completeMetaNames(args, "sessions", sandbox.ValidateSessionName)
}

package runcli

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
)

const rootLong = `agentkernel runs commands in isolated sandboxes built from OCI images, so
that AI coding agents can execute the code they write without risking the
machine they run on.

  agentkernel run python3 -c 'print(1)'     picks python:3.12-alpine, runs, exits 0
  agentkernel run -p restrictive -- sh -c 'id; ls /'
  agentkernel detect -- cargo test          which image would run this, and why

The default backend is built in: Linux namespaces, an overlay root
filesystem, cgroup limits, seccomp, Landlock and dropped capabilities, with
no daemon and no external runtime. Images are pulled from any OCI registry
and cached by digest; with no registry reachable, auto-detected images fall
back to the host's own read-only toolchain ("host" image).

Configuration lives in agentkernel.toml (see 'agentkernel init').`

// NewRoot builds the root command (global flags, help groups) with 'run'
// as its one subcommand. The full command line adds the others.
func NewRoot(a *App) *cobra.Command {
	root := &cobra.Command{
		Use:           "agentkernel",
		Short:         "Run AI agents' commands in fast, isolated sandboxes",
		Long:          rootLong,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       a.Version.Version,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return a.setupLogging()
		},
	}
	root.SetVersionTemplate(fmt.Sprintf("agentkernel %s (commit %s, %s)\n", a.Version.Version, a.Version.Commit, a.Version.Go))
	root.SetIn(a.Stdin)
	root.SetOut(a.Stdout)
	root.SetErr(a.Stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &ExitError{Code: ExitAgentkernel, Err: err, Hint: fmt.Sprintf("see '%s --help'", c.CommandPath())}
	})

	pf := root.PersistentFlags()
	pf.StringVarP(&a.ConfigPath, "config", "c", "", "use this agentkernel.toml instead of ./agentkernel.toml")
	pf.StringVar(&a.DataDir, "data-dir", DefaultDataDir(), "where images, layers and sandbox state live")
	pf.StringVar(&a.LogLevel, "log-level", "warn", "log verbosity: debug, info, warn, error")
	pf.BoolVarP(&a.Quiet, "quiet", "q", false, "print only the command's own output and errors")

	root.AddGroup(
		&cobra.Group{ID: "run", Title: "Running commands:"},
		&cobra.Group{ID: "setup", Title: "Images and configuration:"},
		&cobra.Group{ID: "agents", Title: "Coding agents:"},
		&cobra.Group{ID: "other", Title: "Other commands:"},
	)
	root.CompletionOptions.DisableDefaultCmd = true
	run := newRunCmd(a)
	run.GroupID = "run"
	root.AddCommand(run)
	return root
}

func (a *App) setupLogging() error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(strings.ToLower(a.LogLevel))); err != nil {
		return UsageError("--log-level %q: use debug, info, warn or error", a.LogLevel)
	}
	a.Logger = slog.New(slog.NewTextHandler(a.Stderr, &slog.HandlerOptions{Level: lvl}))
	return nil
}

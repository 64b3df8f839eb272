package cli

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/backend/native/prestart"
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

// NewRootCommand builds the whole command tree.
func NewRootCommand(a *App) *cobra.Command { return newRoot(a, true) }

// NewRootCommandFor builds the command tree a command line needs: all of
// it, or the root and 'run' alone for a run. The whole tree costs a few
// hundred microseconds to build, and every run pays for it.
func NewRootCommandFor(a *App, args []string) *cobra.Command {
	return newRoot(a, !prestart.IsRun(args))
}

func newRoot(a *App, full bool) *cobra.Command {
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
	add := func(group string, cmds ...*cobra.Command) {
		for _, c := range cmds {
			c.GroupID = group
			root.AddCommand(c)
		}
	}
	root.CompletionOptions.DisableDefaultCmd = true
	add("run", newRunCmd(a))
	if !full {
		return root
	}
	add("run", sandboxCommands(a)...)
	add("agents", newMCPServerCmd(a), newMCPCmd(a), newPluginCmd(a), newAgentsCmd(a))
	add("setup", newImagesCmd(a), newDetectCmd(a), newInitCmd(a), newConfigCmd(a), newProfilesCmd(a))
	add("run", newServeCmd(a))
	add("run", daemonCommands(a)...)
	add("other", newGCCmd(a), newVersionCmd(a), newCompletionCmd(a))
	root.SetHelpCommandGroupID("other")
	root.SetCompletionCommandGroupID("other")
	return root
}

func (a *App) setupLogging() error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(strings.ToLower(a.LogLevel))); err != nil {
		return usageError("--log-level %q: use debug, info, warn or error", a.LogLevel)
	}
	a.Logger = slog.New(slog.NewTextHandler(a.Stderr, &slog.HandlerOptions{Level: lvl}))
	return nil
}

func newVersionCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintf(a.Stdout, "agentkernel %s (commit %s, %s)\n", a.Version.Version, a.Version.Commit, a.Version.Go)
			return nil
		},
	}
}

func newCompletionCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:       "completion bash|zsh|fish",
		Aliases:   []string{"completions"},
		Short:     "Print a shell completion script",
		Long:      "Print a completion script. For bash: source <(agentkernel completion bash)",
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"bash", "zsh", "fish"},
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(a.Stdout, true)
			case "zsh":
				return root.GenZshCompletion(a.Stdout)
			case "fish":
				return root.GenFishCompletion(a.Stdout, true)
			}
			return usageError("unknown shell %q: use bash, zsh or fish", args[0])
		},
	}
}

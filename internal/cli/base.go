package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
)

// newBaseRoot builds the root command (global flags, help groups) with
// 'run' as its one subcommand; newRoot adds the others. The agentkernel
// binary parses a run's command line without cobra (runcli.App.Execute),
// with the same flags: TestLeanRunParse holds the two to the same result.
func newBaseRoot(a *runcli.App) *cobra.Command {
	root := &cobra.Command{
		Use:           "agentkernel",
		Short:         "Run AI agents' commands in fast, isolated sandboxes",
		Long:          runcli.RootLong,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       a.Version.Version,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return a.SetupLogging()
		},
	}
	root.SetVersionTemplate(fmt.Sprintf("agentkernel %s (commit %s, %s)\n", a.Version.Version, a.Version.Commit, a.Version.Go))
	root.SetIn(a.Stdin)
	root.SetOut(a.Stdout)
	root.SetErr(a.Stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &runcli.ExitError{Code: runcli.ExitAgentkernel, Err: err, Hint: fmt.Sprintf("see '%s --help'", c.CommandPath())}
	})
	runcli.BindGlobalFlags(root.PersistentFlags(), a)
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

func newRunCmd(a *runcli.App) *cobra.Command {
	var o runcli.RunOptions
	cmd := &cobra.Command{
		Use:     "run [flags] [--] COMMAND [ARG...]",
		Short:   "Run a command in a fresh, isolated sandbox",
		Long:    runcli.RunLong,
		Example: runcli.RunExample,
		Args:    cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.RunCommand(cmd.Context(), &o, runcli.ChangedFlags(cmd.Flags()), args)
		},
	}
	runcli.BindRunFlags(cmd.Flags(), &o)
	return cmd
}

package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
)

// newBaseRoot builds the root command (global flags, help groups) with
// 'run' as its first subcommand; newRoot adds the others.
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

// newRunCmd is 'run' as the command tree knows it: its line in the
// root's help, 'agentkernel help run' and the completion of its flags.
// Cobra does not parse its flags (but when completing: NewRootCommandFor):
// a command line cobra routes here goes to runcli's parser as "run" and
// the rest (cobra has taken "run" out).
// A run's command line as users write it does not come here at all:
// NewRootCommandFor gives it to runcli's parser whole (newRunRoot).
func newRunCmd(a *runcli.App) *cobra.Command {
	cmd := &cobra.Command{
		Use:                "run [flags] [--] COMMAND [ARG...]",
		Short:              "Run a command in a fresh, isolated sandbox",
		Long:               runcli.RunLong,
		Example:            runcli.RunExample,
		Args:               cobra.ArbitraryArgs,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return executeRun(a, append([]string{"run"}, args...))
		},
	}
	// Bound for completion only; runcli.ParseRun binds its own.
	runcli.BindRunFlags(cmd.Flags(), &runcli.RunOptions{})
	cmd.SetHelpFunc(func(*cobra.Command, []string) { a.PrintRunHelp(a.Stdout) })
	return cmd
}

// newRunRoot is the command of a run's command line (argv without the
// program name): cobra only carries it to runcli's parser, which finds
// "run" and reads every flag, before "run" and after, as the agentkernel
// binary does. Cobra's routing would not do: it reads a flag it does not
// know (one of run's before "run", grouped switches) as taking a value.
func newRunRoot(a *runcli.App) *cobra.Command {
	return &cobra.Command{
		Use:                "agentkernel",
		SilenceUsage:       true,
		SilenceErrors:      true,
		DisableFlagParsing: true,
		Args:               cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, argv []string) error {
			return executeRun(a, argv)
		},
	}
}

// executeRun runs a run's command line: runcli's Execute, with its help
// printed here.
func executeRun(a *runcli.App, argv []string) error {
	err := a.Execute(argv)
	switch {
	case errors.Is(err, runcli.ErrRunHelp):
		a.PrintRunHelp(a.Stdout)
		return nil
	case errors.Is(err, runcli.ErrNeedsFull):
		// Not a run (newRunRoot is only made for one), or a cached-only
		// App that agentkernel-full does not make.
		return fmt.Errorf("%w (%q)", err, argv)
	}
	return err
}

package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/backend/native/prestart"
)

// NewRootCommand builds the whole command tree.
func NewRootCommand(a *App) *cobra.Command { return newRoot(a) }

// NewRootCommandFor builds the command a command line (args, the program
// name first) needs: for a run, one that hands it to runcli's parser
// whole, without building the command tree (a few hundred microseconds);
// else the whole tree.
func NewRootCommandFor(a *App, args []string) *cobra.Command {
	if prestart.IsRun(args) {
		a.OpenImages = a.runImages
		a.MoreBackends = a.moreBackends
		a.PickAuto = a.pickAuto
		a.RunPersistent = a.runPersistent
		a.ResolveSecrets = a.resolveSecrets
		a.SecretValues = a.secretValues
		a.Receipts = &receiptIssuer{a: a}
		return newRunRoot(a.App)
	}
	root := newRoot(a)
	if completing(args) {
		// Completing, cobra reads run's flags (and exec's, attach's,
		// cp's and stats's) to know where the command's arguments begin
		// (and offers run's command's files, not run's flags, there).
		for _, name := range leanParsedCommands {
			if c, _, err := root.Find([]string{name}); err == nil && c.Name() == name {
				c.DisableFlagParsing = false
			}
		}
	}
	return root
}

func newRoot(a *App) *cobra.Command {
	a.OpenImages = a.runImages
	a.MoreBackends = a.moreBackends
	a.PickAuto = a.pickAuto
	a.RunPersistent = a.runPersistent
	a.ResolveSecrets = a.resolveSecrets
	a.SecretValues = a.secretValues
	a.Receipts = &receiptIssuer{a: a}
	a.Recorder = &terminalRecorder{a: a}
	root := newBaseRoot(a.App)
	add := func(group string, cmds ...*cobra.Command) {
		for _, c := range cmds {
			c.GroupID = group
			root.AddCommand(c)
		}
	}
	add("run", sandboxCommands(a)...)
	add("agents", newMCPServerCmd(a), newMCPCmd(a), newPluginCmd(a), newAgentsCmd(a))
	add("setup", newImagesCmd(a), newDetectCmd(a), newInitCmd(a), newConfigCmd(a), newProfilesCmd(a), newTemplateCmd(a))
	add("setup", newSecretCmd(a))
	add("setup", newDoctorCmd(a), newSetupCmd(a), newStatusCmd(a))
	add("run", newServeCmd(a))
	add("run", newReceiptCmd(a), newReplayCmd(a), newParallelCmd(a), newPipelineCmd(a))
	add("run", daemonCommands(a)...)
	add("other", newGCCmd(a), newVersionCmd(a), newCompletionCmd(a))
	root.SetHelpCommandGroupID("other")
	root.SetCompletionCommandGroupID("other")
	registerCompletions(a, root)
	return root
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

// cmdContext is cmd's context, or the background one for a command run
// without one (tests that call RunE directly).
func cmdContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

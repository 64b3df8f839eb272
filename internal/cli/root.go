package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/backend/native/prestart"
)

// NewRootCommand builds the whole command tree.
func NewRootCommand(a *App) *cobra.Command { return newRoot(a, true) }

// NewRootCommandFor builds the command tree a command line needs: all of
// it, or the root and 'run' alone for a run. The whole tree costs a few
// hundred microseconds to build, and every run pays for it.
func NewRootCommandFor(a *App, args []string) *cobra.Command {
	return newRoot(a, !prestart.IsRun(args))
}

func newRoot(a *App, full bool) *cobra.Command {
	a.OpenImages = a.runImages
	root := newBaseRoot(a.App)
	if !full {
		return root
	}
	add := func(group string, cmds ...*cobra.Command) {
		for _, c := range cmds {
			c.GroupID = group
			root.AddCommand(c)
		}
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

package cli

import (
	"github.com/spf13/cobra"
)

func newCpCmd(a *App) *cobra.Command {
	return leanParsed(&cobra.Command{
		Use:   "cp SRC DEST",
		Short: "Copy files or directories between a running sandbox and the host",
		Long: `Copy a file or directory tree into or out of a running sandbox; one side
is NAME:/path. Like docker cp: when DEST is an existing directory the source
is copied into it, otherwise it is copied to DEST, whose parent directory
must exist (DEST/ with a trailing slash must be an existing directory).
Paths in the sandbox are
resolved inside it (its symlinks never reach host files); set-id bits are
dropped and symlinks are copied as symlinks.`,
		Example: `  agentkernel cp ./src dev:/work/src
  agentkernel cp dev:/work/out.txt .`,
		Args:               cobra.ArbitraryArgs,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runSandboxCommand(cmd, args)
		},
	})
}

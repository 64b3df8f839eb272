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
A source that does not exist, on either side, is an error that names it.

As with docker cp, "-" on the host side is a tar stream: 'cp - NAME:DIR'
reads a tar archive from standard input and extracts it into DIR, a
directory that must exist in the sandbox (input that is not a tar archive,
or an empty one, is an error); 'cp NAME:PATH -' writes PATH as a tar archive
to standard output (never to a terminal), its entries named by PATH's base
name.

Paths in the sandbox are resolved inside it (its symlinks never reach
host files), and so are the names in an archive extracted into it; set-id
bits are dropped and symlinks are copied as symlinks. A host source that is
itself a symbolic link is refused: give the path it points to.`,
		Example: `  agentkernel cp ./src dev:/work/src
  agentkernel cp dev:/work/out.txt .
  tar -C build -cf - . | agentkernel cp - dev:/work/build   # a tar stream in
  agentkernel cp dev:/work/logs - | tar -xf -              # and out`,
		Args:               cobra.ArbitraryArgs,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runSandboxCommand(cmd, args)
		},
	})
}

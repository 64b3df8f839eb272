//go:build !linux

package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// sandboxCommands: persistent sandboxes need the native backend (Linux).
func sandboxCommands(a *App) []*cobra.Command { return nil }

// SuperviseMain exists on Linux only: persistent sandboxes need Linux.
func SuperviseMain(args []string) int {
	fmt.Fprintln(os.Stderr, "agentkernel: persistent sandboxes need Linux")
	return ExitAgentkernel
}

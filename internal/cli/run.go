package cli

import "github.com/spf13/cobra"

// newRunCmd is a placeholder until the command is written.
func newRunCmd(a *App) *cobra.Command { return &cobra.Command{Use: "run", Hidden: true} }

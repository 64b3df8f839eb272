package cli

import "github.com/spf13/cobra"

// newGCCmd is a placeholder until the command is written.
func newGCCmd(a *App) *cobra.Command { return &cobra.Command{Use: "gc", Hidden: true} }

package cli

import "github.com/spf13/cobra"

// newDetectCmd is a placeholder until the command is written.
func newDetectCmd(a *App) *cobra.Command { return &cobra.Command{Use: "detect", Hidden: true} }

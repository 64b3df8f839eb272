package cli

import "github.com/spf13/cobra"

// newImagesCmd is a placeholder until the command is written.
func newImagesCmd(a *App) *cobra.Command { return &cobra.Command{Use: "images", Hidden: true} }

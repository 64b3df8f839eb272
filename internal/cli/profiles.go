package cli

import "github.com/spf13/cobra"

// newProfilesCmd is a placeholder until the command is written.
func newProfilesCmd(a *App) *cobra.Command { return &cobra.Command{Use: "profiles", Hidden: true} }

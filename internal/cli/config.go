package cli

import "github.com/spf13/cobra"

// newInitCmd is a placeholder until the command is written.
func newInitCmd(a *App) *cobra.Command { return &cobra.Command{Use: "init", Hidden: true} }

// newConfigCmd is a placeholder until the command is written.
func newConfigCmd(a *App) *cobra.Command { return &cobra.Command{Use: "config", Hidden: true} }

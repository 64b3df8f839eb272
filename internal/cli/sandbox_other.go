//go:build !linux

package cli

import "github.com/spf13/cobra"

// sandboxCommands: persistent sandboxes need the native backend (Linux).
func sandboxCommands(a *App) []*cobra.Command { return nil }

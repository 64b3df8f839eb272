package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/backend/engine"
	"github.com/agentkernel/agentkernel/internal/backend/gvisor"
	"github.com/agentkernel/agentkernel/internal/backend/native"
)

func newGCCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "gc",
		Short: "Remove what crashed or killed runs left behind",
		Long: `Remove what runs that crashed or were killed left behind: scratch
directories, cgroups and mounts whose owning agentkernel process is gone,
the docker and podman containers (with their volumes) of runs and
persistent sandboxes whose agentkernel process was killed, and the
idmapped mounts such runs had attached in the engine daemon's mount
namespace for their writable host directories.
Only this data directory's (--data-dir) runs are judged: another data
directory's leftovers are its own gc's. Runs in progress are never touched.
Safe to run at any time.`,
		Example: "  agentkernel gc",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			removed, err := native.GC(cmd.Context(), a.DataDir)
			more, gerr := gvisor.GC(cmd.Context(), a.DataDir)
			removed, err = append(removed, more...), errors.Join(err, gerr)
			more, gerr = engine.GC(cmd.Context(), a.DataDir, engine.Docker(a.engineOptions()), engine.Podman(a.engineOptions()))
			removed, err = append(removed, more...), errors.Join(err, gerr)
			for _, r := range removed {
				fmt.Fprintf(a.Stdout, "removed %s\n", r)
			}
			if err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("gc: %w", err)}
			}
			if len(removed) == 0 {
				a.Infof("nothing to remove")
			}
			return nil
		},
	}
}

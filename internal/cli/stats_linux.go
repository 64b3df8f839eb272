package cli

import (
	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
)

func newStatsCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "stats [NAME...]",
		Short: "Show CPU, memory, processes and disk of sandboxes, and host totals",
		Long: `Show each persistent sandbox's resource use — CPU (percent over a 0.5 s
sample, and seconds in total), memory charged to its cgroup, processes, and
the disk its writable layers take (its root's and each copy-on-write
volume's, such as /workspace's) — then the host's totals. Without NAME
every sandbox is shown; stopped ones report only their disk. SUPERVISOR is
the resident memory of the host-side processes keeping a sandbox (its
supervisor and init), which its cgroup does not count.`,
		Example: `  agentkernel stats
  agentkernel stats dev --json`,
		Args:               cobra.ArbitraryArgs,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			// The agentkernel binary serves stats of running sandboxes
			// itself, through the same parser and writer
			// (runcli.ParseSandboxCommand, runcli.WriteStats).
			return a.runSandboxCommand(cmd, args)
		},
	}
	// Bound for help and completion only.
	runcli.BindStatsFlags(cmd.Flags(), &runcli.StatsOptions{})
	return leanParsed(cmd)
}

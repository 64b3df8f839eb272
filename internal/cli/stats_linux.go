package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

func newStatsCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats [NAME...]",
		Short: "Show CPU, memory, processes and disk of sandboxes, and host totals",
		Long: `Show each persistent sandbox's resource use — CPU (percent over a 0.5 s
sample, and seconds in total), memory charged to its cgroup, processes, and
the disk its writable layer takes — then the host's totals. Without NAME
every sandbox is shown; stopped ones report only their disk. SUPERVISOR is
the resident memory of the host-side processes keeping a sandbox (its
supervisor and init), which its cgroup does not count.`,
		Example: `  agentkernel stats
  agentkernel stats dev --json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, n := range args {
				if err := validName(n); err != nil {
					return err
				}
			}
			m, done, err := a.sandboxes()
			if err != nil {
				return err
			}
			defer done()
			usage, host, err := m.Stats(cmd.Context(), 500*time.Millisecond, args...)
			if err != nil {
				name := ""
				if len(args) > 0 {
					name = args[0]
				}
				return sandboxError(name, err)
			}
			if asJSON {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					Sandboxes []sandbox.Usage   `json:"sandboxes"`
					Host      sandbox.HostUsage `json:"host"`
				}{usage, host})
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATUS\tCPU%\tCPU TIME\tMEMORY\tPIDS\tDISK\tSUPERVISOR")
			for _, u := range usage {
				if u.Status != sandbox.StatusRunning {
					fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t%s\t-\n", u.Name, u.Status, bytesHuman(u.UpperBytes))
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.2fs\t%s\t%d\t%s\t%s\n", u.Name, u.Status, u.CPUPercent, u.CPUSeconds,
					bytesHuman(u.MemoryBytes), u.Pids, bytesHuman(u.UpperBytes), bytesHuman(u.SupervisorRSS+u.InitRSS))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(a.Stdout, "\nhost: %d CPUs, %.1f%% busy, load %.2f; memory %s of %s used; data dir %s, %s free; %d sandboxes, %d running\n",
				host.CPUs, host.CPUPercent, host.Load1, bytesHuman(host.MemoryUsedBytes), bytesHuman(host.MemoryTotalBytes),
				bytesHuman(host.DataDirBytes), bytesHuman(host.DiskFreeBytes), host.Sandboxes, host.Running)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// bytesHuman is n in B, KiB, MiB, GiB.
func bytesHuman(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 3; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGT"[exp])
}

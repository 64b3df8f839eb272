package runcli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// StatsSample is how long 'stats' measures running sandboxes' CPU.
const StatsSample = 500 * time.Millisecond

// RunStats is 'stats': the resource use of the sandboxes called names
// (every one when there are none) and the host's totals, from
// m.Stats, written by WriteStats. Errors that say a sandbox is unknown
// or stopped come back as they are, for the caller to word.
func (a *App) RunStats(ctx context.Context, m *sandbox.Manager, names []string, o *StatsOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	usage, host, err := m.Stats(ctx, StatsSample, names...)
	if err != nil {
		return err
	}
	return WriteStats(a.Stdout, usage, host, o.JSON)
}

// WriteStats writes what 'stats' prints, in both binaries: a table of
// the sandboxes and a line of the host's totals, or, asJSON, one JSON
// object of the two.
func WriteStats(w io.Writer, usage []sandbox.Usage, host sandbox.HostUsage, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Sandboxes []sandbox.Usage   `json:"sandboxes"`
			Host      sandbox.HostUsage `json:"host"`
		}{usage, host})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATUS\tCPU%\tCPU TIME\tMEMORY\tPIDS\tDISK\tSUPERVISOR")
	for _, u := range usage {
		if u.Status != sandbox.StatusRunning {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t%s\t-\n", u.Name, u.Status, BytesHuman(u.UpperBytes))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.2fs\t%s\t%d\t%s\t%s\n", u.Name, u.Status, u.CPUPercent, u.CPUSeconds,
			BytesHuman(u.MemoryBytes), u.Pids, BytesHuman(u.UpperBytes), BytesHuman(u.SupervisorRSS+u.InitRSS))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nhost: %d CPUs, %.1f%% busy, load %.2f; memory %s of %s used; data dir %s, %s free; %d sandboxes, %d running\n",
		host.CPUs, host.CPUPercent, host.Load1, BytesHuman(host.MemoryUsedBytes), BytesHuman(host.MemoryTotalBytes),
		BytesHuman(host.DataDirBytes), BytesHuman(host.DiskFreeBytes), host.Sandboxes, host.Running)
	return err
}

// BytesHuman is n in B, KiB, MiB, GiB or TiB.
func BytesHuman(n int64) string {
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

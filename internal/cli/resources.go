package cli

import (
	"fmt"
	"io"
	"strconv"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// writeResources writes a sandbox's limits as rows of a tabwriter table,
// one per resource, in words ("no limit" where none is set).
func writeResources(w io.Writer, r sandbox.Resources) {
	row := func(name string, set bool, v string) {
		if !set {
			v = "no limit"
		}
		fmt.Fprintf(w, "%s:\t%s\n", name, v)
	}
	cores := strconv.FormatFloat(float64(r.CPUPercent)/100, 'f', -1, 64)
	unit := " cores"
	if r.CPUPercent == 100 {
		unit = " core"
	}
	row("CPU", r.CPUPercent > 0, cores+unit)
	row("Memory", r.MemoryMB > 0, strconv.FormatInt(r.MemoryMB, 10)+" MiB")
	row("Processes", r.PIDs > 0, strconv.FormatInt(r.PIDs, 10))
	if r.DiskMB > 0 {
		fmt.Fprintf(w, "/tmp and /run:\t%d MiB each\n", r.DiskMB)
	} else {
		fmt.Fprintf(w, "/tmp and /run:\tthe backend's default size\n")
	}
	row("Command timeout", r.Timeout > 0, r.Timeout.String())
}

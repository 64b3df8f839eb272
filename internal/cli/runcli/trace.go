package runcli

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

var traceStages = os.Getenv("AGENTKERNEL_TRACE_STAGES") != ""

// TraceStage writes "<CLOCK_MONOTONIC ms> front: <stage>" to stderr when
// AGENTKERNEL_TRACE_STAGES is set, like the native backend's stage lines
// (bench/cmd/stagetrace reads both), so that the CLI's own start-up shows
// in a run's timeline.
func TraceStage(stage string) {
	if !traceStages {
		return
	}
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	fmt.Fprintf(os.Stderr, "%.3f front: %s\n", float64(ts.Nano())/1e6, stage)
}

package gvisor

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// TraceEnv set in agentkernel's environment makes a run write one line
// per stage of its way through this backend to stderr, "<CLOCK_MONOTONIC
// ms> gvisor: <stage>", as the native backend and the CLI write theirs
// (bench/cmd/stagetrace reads them).
const TraceEnv = "AGENTKERNEL_TRACE_STAGES"

// tracer writes a run's stage lines, or nothing (the zero value).
type tracer bool

func newTracer() tracer { return tracer(os.Getenv(TraceEnv) != "") }

func (t tracer) stage(s string) {
	if !t {
		return
	}
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	fmt.Fprintf(os.Stderr, "%.3f gvisor: %s\n", float64(ts.Nano())/1e6, s)
}

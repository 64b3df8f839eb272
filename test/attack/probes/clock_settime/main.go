//go:build linux

// Probe clock_settime tries to set the system clock (not namespaced) to
// the current time, so a success changes nothing but proves the hole.
package main

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "clock_settime"

func main() {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_REALTIME, &ts)
	e1 := unix.ClockSettime(unix.CLOCK_REALTIME, &ts)
	tv := unix.NsecToTimeval(ts.Nano())
	e2 := unix.Settimeofday(&tv)
	var tx unix.Timex
	tx.Modes = 0x0001 // ADJ_OFFSET with offset 0
	_, e3 := unix.Adjtimex(&tx)
	if e1 == nil || e2 == nil || e3 == nil {
		report("allowed", fmt.Sprintf("clock_settime: %v, settimeofday: %v, adjtimex: %v", e1, e2, e3))
	}
	report("blocked", fmt.Sprintf("clock_settime: %v; settimeofday: %v; adjtimex: %v", e1, e2, e3))
}

func report(result, detail string) { probe.Report(name, result, detail) }

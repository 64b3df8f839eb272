//go:build linux

// Probe clock_settime tries to set the system clock (not namespaced) to
// the current time, so a success changes nothing but proves the hole.
package main

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "clock_settime"

func main() { probe.Run(name, attack, control) }

func attack() {
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

// control: outside a sandbox the clock is never touched. settimeofday
// with only a time zone that is out of range, and adjtimex changing the
// tick to an impossible value, fail with EINVAL after the CAP_SYS_TIME
// check (EPERM before it); clock_settime with a NULL time faults (EFAULT)
// where it is not filtered.
func control() {
	tz := [2]int32{100000, 0} // struct timezone: tz_minuteswest beyond ±15 h
	_, _, e1 := unix.Syscall(unix.SYS_SETTIMEOFDAY, 0, uintptr(unsafe.Pointer(&tz[0])), 0)
	tx := unix.Timex{Modes: 0x4000 /* ADJ_TICK */, Tick: 1}
	_, e2 := unix.Adjtimex(&tx)
	_, _, e3 := unix.Syscall(unix.SYS_CLOCK_SETTIME, unix.CLOCK_REALTIME, 0, 0)
	detail := fmt.Sprintf("settimeofday(bad zone): %v; adjtimex(bad tick): %v; clock_settime(NULL): %v", e1, e2, e3)
	switch {
	case e1 == unix.EINVAL && e2 == unix.EINVAL:
		report(probe.Reachable, "CAP_SYS_TIME held outside a sandbox (nothing changed): "+detail)
	case !probe.Privileged() && e1 == unix.EPERM && e2 == unix.EPERM:
		report(probe.NotApplicable, "setting the clock needs CAP_SYS_TIME in the initial user namespace, which this user lacks with or without a sandbox: "+detail)
	}
	report(probe.Unreachable, detail)
}

func report(result, detail string) { probe.Report(name, result, detail) }

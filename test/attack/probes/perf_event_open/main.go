//go:build linux

// Probe perf_event_open tries to open a software perf event on itself
// (perf is a frequent source of kernel bugs and side channels).
package main

import (
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "perf_event_open"

func main() { probe.Run(name, attack, control) }

func try() error {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unix.PERF_ATTR_SIZE_VER0),
		Bits:   unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv,
	}
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

func attack() {
	if err := try(); err != nil {
		report("blocked", "perf_event_open: "+err.Error())
	}
	report("allowed", "perf_event_open on self succeeded")
}

// control: the same event outside a sandbox.
func control() {
	err := try()
	switch {
	case err == nil:
		report(probe.Reachable, "perf_event_open on self succeeds outside a sandbox")
	case kernelLacks(err) || err == unix.ENOENT || err == unix.EOPNOTSUPP:
		report(probe.NotApplicable, "this kernel has no software perf events: "+err.Error())
	case !probe.Privileged() && probe.Refused(err):
		report(probe.NotApplicable, "kernel.perf_event_paranoid="+probe.Sysctl("kernel/perf_event_paranoid")+" refuses perf events to this user, with or without a sandbox: "+err.Error())
	}
	report(probe.Unreachable, "perf_event_open: "+err.Error())
}

func kernelLacks(errs ...error) bool {
	lacks, _ := probe.KernelLacks(errs...)
	return lacks
}

func report(result, detail string) { probe.Report(name, result, detail) }

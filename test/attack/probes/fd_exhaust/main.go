//go:build linux

// Probe fd_exhaust tries to lift the open-files limit it was given: it
// raises RLIMIT_NOFILE's hard limit by one (a process that can do that can
// take descriptors up to the kernel's fs.nr_open and, with a few
// processes, the system-wide table). Where that is refused it duplicates
// descriptors until that fails. "blocked": the hard limit stayed where
// the sandbox set it and the per-process limit (EMFILE) stopped the
// copies; raising it, ENFILE (the system-wide table) or reaching the cap
// is "allowed".
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "fd_exhaust"

func main() { probe.Run(name, attack, control) }

// raise tries to set the hard open-files limit one above the current one.
func raise() (before unix.Rlimit, err error) {
	unix.Getrlimit(unix.RLIMIT_NOFILE, &before)
	if before.Max == unix.RLIM_INFINITY {
		return before, nil
	}
	return before, unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: before.Cur, Max: before.Max + 1})
}

func attack() {
	capN := 1 << 21
	if v, err := strconv.Atoi(os.Getenv("ATTACK_FD_CAP")); err == nil {
		capN = v
	}
	rl, raiseErr := raise()
	if raiseErr == nil {
		report("allowed", fmt.Sprintf("raised the open-files hard limit above the %d it was given", rl.Max))
	}
	soft := rl.Cur
	rl.Cur = rl.Max
	unix.Setrlimit(unix.RLIMIT_NOFILE, &rl)
	n := 0
	for ; n < capN; n++ {
		if _, err := unix.Dup(0); err != nil {
			if err == unix.EMFILE {
				report("blocked", fmt.Sprintf("EMFILE after %d fds (soft was %d, hard %d; raising the hard limit: %v)", n, soft, rl.Max, raiseErr))
			}
			report("allowed", fmt.Sprintf("%v after %d fds", err, n))
		}
	}
	report("allowed", fmt.Sprintf("opened %d fds (the cap)", n))
}

// control, scaled down: outside a sandbox the same raise of the hard limit
// by one works (root holds CAP_SYS_RESOURCE); no descriptor is taken.
func control() {
	rl, err := raise()
	switch {
	case err == nil:
		report(probe.Reachable, fmt.Sprintf("outside a sandbox the open-files hard limit rises above %d", rl.Max))
	case !hasCapSysResource():
		report(probe.NotApplicable, fmt.Sprintf("this process holds no CAP_SYS_RESOURCE (this host's root lacks it too): no process here raises its open-files hard limit (%d), sandbox or not: %v", rl.Max, err))
	case probe.Sysctl("fs/nr_open") == strconv.FormatUint(rl.Max, 10):
		report(probe.NotApplicable, fmt.Sprintf("the hard limit is already the kernel's fs.nr_open (%d): no process raises it, sandbox or not", rl.Max))
	case !probe.Privileged():
		report(probe.NotApplicable, fmt.Sprintf("an unprivileged user cannot raise its open-files hard limit (%d), with or without a sandbox: %v", rl.Max, err))
	}
	report(probe.Unreachable, fmt.Sprintf("raising the hard limit %d: %v", rl.Max, err))
}

// hasCapSysResource reports whether CAP_SYS_RESOURCE (24) is in this
// process's effective set.
func hasCapSysResource() bool {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			eff, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return eff&(1<<24) != 0
		}
	}
	return false
}

func report(result, detail string) { probe.Report(name, result, detail) }

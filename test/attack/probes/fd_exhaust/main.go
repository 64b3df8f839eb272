//go:build linux

// Probe fd_exhaust raises RLIMIT_NOFILE to its hard limit and duplicates
// descriptors until that fails. "blocked": the per-process limit (EMFILE)
// stopped it; ENFILE (the system-wide table) or reaching the cap is
// "allowed".
package main

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "fd_exhaust"

func main() {
	capN := 1 << 21
	if v, err := strconv.Atoi(os.Getenv("ATTACK_FD_CAP")); err == nil {
		capN = v
	}
	var rl unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &rl)
	soft := rl.Cur
	rl.Cur = rl.Max
	unix.Setrlimit(unix.RLIMIT_NOFILE, &rl)
	raise := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 1 << 20, Max: 1 << 20})
	unix.Getrlimit(unix.RLIMIT_NOFILE, &rl)
	n := 0
	for ; n < capN; n++ {
		if _, err := unix.Dup(0); err != nil {
			if err == unix.EMFILE {
				report("blocked", fmt.Sprintf("EMFILE after %d fds (soft was %d, hard %d; raising the hard limit: %v)", n, soft, rl.Max, raise))
			}
			report("allowed", fmt.Sprintf("%v after %d fds", err, n))
		}
	}
	report("allowed", fmt.Sprintf("opened %d fds (the cap)", n))
}

func report(result, detail string) { probe.Report(name, result, detail) }

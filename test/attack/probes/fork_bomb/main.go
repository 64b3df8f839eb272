//go:build linux

// Probe fork_bomb starts processes (busybox sleep) until fork fails or a
// cap is reached. "blocked": the sandbox's pids limit stopped it below the
// cap. The children are killed before the probe reports.
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "fork_bomb"

func main() {
	limit := 8192
	if v, err := strconv.Atoi(os.Getenv("ATTACK_PROC_CAP")); err == nil {
		limit = v
	}
	start := time.Now()
	var pids []int
	var ferr error
	attr := &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Setpgid: true}}
	for len(pids) < limit {
		pid, err := syscall.ForkExec("/bin/busybox", []string{"sleep", "300"}, attr)
		if err != nil {
			ferr = err
			break
		}
		if len(pids) == 0 {
			attr.Sys.Pgid = pid
		}
		pids = append(pids, pid)
	}
	n := len(pids)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range pids {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
	}
	if ferr != nil {
		report("blocked", fmt.Sprintf("fork failed after %d processes in %v: %v", n, time.Since(start).Round(time.Millisecond), ferr))
	}
	report("allowed", fmt.Sprintf("started %d processes (the cap) in %v without hitting a limit", n, time.Since(start).Round(time.Millisecond)))
}

func report(result, detail string) { probe.Report(name, result, detail) }

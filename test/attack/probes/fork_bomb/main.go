//go:build linux

// Probe fork_bomb starts processes (busybox sleep) until fork fails or a
// cap is reached. "blocked": the sandbox's pids limit stopped it below the
// cap. The children are killed before the probe reports.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "fork_bomb"

func main() { probe.Run(name, attack, control) }

func procCap() int {
	if v, err := strconv.Atoi(os.Getenv("ATTACK_PROC_CAP")); err == nil {
		return v
	}
	return 8192
}

// bomb starts up to limit copies of argv (a sleep), kills them all and
// returns how many it started and the error that stopped it.
func bomb(limit int, argv0 string, argv []string) (int, error, time.Duration) {
	start := time.Now()
	var pids []int
	var ferr error
	// The children keep the environment: the battery knows its processes
	// by it.
	attr := &syscall.ProcAttr{Env: os.Environ(), Sys: &syscall.SysProcAttr{Setpgid: true}}
	for len(pids) < limit {
		pid, err := syscall.ForkExec(argv0, argv, attr)
		if err != nil {
			ferr = err
			break
		}
		if len(pids) == 0 {
			attr.Sys.Pgid = pid
		}
		pids = append(pids, pid)
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range pids {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
	}
	return len(pids), ferr, time.Since(start).Round(time.Millisecond)
}

func attack() {
	n, ferr, took := bomb(procCap(), "/bin/busybox", []string{"sleep", "300"})
	if ferr != nil {
		report("blocked", fmt.Sprintf("fork failed after %d processes in %v: %v", n, took, ferr))
	}
	report("allowed", fmt.Sprintf("started %d processes (the cap) in %v without hitting a limit", n, took))
}

// sleeper is what the control's children run: this binary, sleeping.
func sleeper() {
	if len(os.Args) > 1 && os.Args[1] == "sleep" {
		time.Sleep(5 * time.Minute)
		os.Exit(0)
	}
}

// control, scaled down: outside a sandbox 64 children start (and are
// killed), and no limit on this process's tasks (its cgroups' pids.max,
// RLIMIT_NPROC for a non-root user, kernel.threads-max) is below the
// probe's cap, so only a sandbox's limit can stop the probe below it.
func control() {
	sleeper()
	limit := procCap()
	n, ferr, took := bomb(64, "/proc/self/exe", []string{"fork_bomb", "sleep"})
	if ferr != nil {
		report(probe.Unreachable, fmt.Sprintf("only %d children started outside a sandbox: %v", n, ferr))
	}
	low, why := hostTaskLimit()
	detail := fmt.Sprintf("started and killed 64 children outside a sandbox in %v; the lowest host limit on this process's tasks is %s", took, why)
	if low < int64(limit) {
		report(probe.NotApplicable, fmt.Sprintf("the host already limits this process below the probe's cap of %d, sandbox or not: %s", limit, detail))
	}
	report(probe.Reachable, detail)
}

// hostTaskLimit is the lowest limit on this process's number of tasks
// outside any sandbox, and where it comes from.
func hostTaskLimit() (int64, string) {
	low, why := int64(1<<62), "none"
	consider := func(v int64, what string) {
		if v < low {
			low, why = v, fmt.Sprintf("%d (%s)", v, what)
		}
	}
	if v, err := strconv.ParseInt(probe.Sysctl("kernel/threads-max"), 10, 64); err == nil {
		consider(v, "kernel.threads-max")
	}
	if !probe.Privileged() {
		var rl syscall.Rlimit
		if syscall.Getrlimit(6 /* RLIMIT_NPROC */, &rl) == nil && rl.Cur < 1<<62 {
			consider(int64(rl.Cur), "RLIMIT_NPROC")
		}
	}
	cg, _ := os.ReadFile("/proc/self/cgroup")
	for _, l := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		var base string
		switch {
		case f[0] == "0" && f[1] == "":
			base = "/sys/fs/cgroup"
		case strings.Contains(","+f[1]+",", ",pids,"):
			base = "/sys/fs/cgroup/pids"
		default:
			continue
		}
		for p := filepath.Join(base, f[2]); strings.HasPrefix(p, base); p = filepath.Dir(p) {
			b, err := os.ReadFile(filepath.Join(p, "pids.max"))
			if v, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && perr == nil {
				consider(v, p+"/pids.max")
			}
			if p == base {
				break
			}
		}
	}
	return low, why
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe memory_bomb makes a child allocate and touch memory in 32 MiB
// steps up to a cap. "blocked": the child was OOM-killed (or refused
// memory) before the cap. When the limit kills this parent too, the
// runner sees no report and an exit by SIGKILL, which it also counts as
// blocked.
package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "memory_bomb"

func main() { probe.Run(name, attack, control) }

func capMB() int {
	if v, err := strconv.Atoi(os.Getenv("ATTACK_MEM_CAP_MB")); err == nil {
		return v
	}
	return 4096
}

// child is the allocating child: "alloc" as its argument.
func child() {
	if len(os.Args) < 2 || os.Args[1] != "alloc" {
		return
	}
	limit := capMB()
	for got := 0; got < limit; got += 32 {
		b, err := syscall.Mmap(-1, 0, 32<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			fmt.Printf("mmap refused at %d MiB: %v\n", got, err)
			os.Exit(3)
		}
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
	}
	fmt.Printf("allocated %d MiB\n", limit)
	os.Exit(0)
}

// run starts the child with env added and returns its output and end.
func run(env ...string) (string, *exec.Cmd, error) {
	cmd := exec.Command("/proc/self/exe", "alloc")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), cmd, err
}

func attack() {
	child()
	limit := capMB()
	out, cmd, err := run()
	if err == nil {
		report("allowed", fmt.Sprintf("child %s without hitting a limit", out))
	}
	if cmd.ProcessState != nil {
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			report("blocked", fmt.Sprintf("child killed by signal %d before %d MiB", int(ws.Signal()), limit))
		}
	}
	report("blocked", fmt.Sprintf("child stopped: %v %s", err, out))
}

// control, scaled down: outside a sandbox the child allocates and touches
// 64 MiB, and neither this process's memory cgroups nor the machine's
// available memory stop it below the probe's cap, so only a sandbox's
// limit can.
func control() {
	child()
	limit := capMB()
	out, _, err := run("ATTACK_MEM_CAP_MB=64")
	if err != nil {
		report(probe.Unreachable, fmt.Sprintf("the child could not allocate 64 MiB outside a sandbox: %v %s", err, out))
	}
	low, why := hostMemoryLimit()
	detail := fmt.Sprintf("outside a sandbox the child %s; the lowest host bound on this process's memory is %s", out, why)
	if low < int64(limit) {
		report(probe.NotApplicable, fmt.Sprintf("the host already bounds this process below the probe's cap of %d MiB, sandbox or not: %s", limit, detail))
	}
	report(probe.Reachable, detail)
}

// hostMemoryLimit is the lowest bound, in MiB, on this process's memory
// outside any sandbox (its memory cgroups' limits, MemAvailable), and
// where it comes from.
func hostMemoryLimit() (int64, string) {
	low, why := int64(1<<62), "none"
	consider := func(bytes int64, what string) {
		if mb := bytes >> 20; mb < low {
			low, why = mb, fmt.Sprintf("%d MiB (%s)", mb, what)
		}
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if v, ok := strings.CutPrefix(s.Text(), "MemAvailable:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				consider(kb<<10, "MemAvailable")
			}
		}
		f.Close()
	}
	cg, _ := os.ReadFile("/proc/self/cgroup")
	for _, l := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		var base, file string
		switch {
		case f[0] == "0" && f[1] == "":
			base, file = "/sys/fs/cgroup", "memory.max"
		case strings.Contains(","+f[1]+",", ",memory,"):
			base, file = "/sys/fs/cgroup/memory", "memory.limit_in_bytes"
		default:
			continue
		}
		for p := filepath.Join(base, f[2]); strings.HasPrefix(p, base); p = filepath.Dir(p) {
			b, err := os.ReadFile(filepath.Join(p, file))
			if v, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && perr == nil {
				consider(v, filepath.Join(p, file))
			}
			if p == base {
				break
			}
		}
	}
	return low, why
}

func report(result, detail string) { probe.Report(name, result, detail) }

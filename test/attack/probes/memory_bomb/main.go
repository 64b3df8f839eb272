//go:build linux

// Probe memory_bomb makes a child allocate and touch memory in 32 MiB
// steps up to a cap. "blocked": the child was OOM-killed (or refused
// memory) before the cap. When the limit kills this parent too, the
// runner sees no report and an exit by SIGKILL, which it also counts as
// blocked.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "memory_bomb"

func main() {
	capMB := 4096
	if v, err := strconv.Atoi(os.Getenv("ATTACK_MEM_CAP_MB")); err == nil {
		capMB = v
	}
	if len(os.Args) > 1 && os.Args[1] == "alloc" {
		for got := 0; got < capMB; got += 32 {
			b, err := syscall.Mmap(-1, 0, 32<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
			if err != nil {
				fmt.Printf("mmap refused at %d MiB: %v\n", got, err)
				os.Exit(3)
			}
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
		}
		fmt.Printf("allocated %d MiB\n", capMB)
		os.Exit(0)
	}
	cmd := exec.Command("/proc/self/exe", "alloc")
	out, err := cmd.CombinedOutput()
	if err == nil {
		report("allowed", fmt.Sprintf("child %s without hitting a limit", string(out)))
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		report("blocked", fmt.Sprintf("child killed by signal %d before %d MiB", int(ws.Signal()), capMB))
	}
	report("blocked", fmt.Sprintf("child stopped: %v %s", err, string(out)))
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe host_proc_visible looks for a host process (a sleep the test
// started with a unique argv[0]) among the processes the sandbox can see,
// and probes its host pid number.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "host_proc_visible"

func main() { probe.Run(name, attack, control) }

func attack() {
	token := os.Getenv("ATTACK_VICTIM_TOKEN")
	if token == "" {
		report("error", "ATTACK_VICTIM_TOKEN not set")
	}
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range pids {
		b, _ := os.ReadFile(p + "/cmdline")
		if strings.Contains(string(b), token) {
			report("allowed", "host process visible as "+p)
		}
	}
	detail := fmt.Sprintf("%d processes visible, none is the host victim", len(pids))
	if pid, err := strconv.Atoi(os.Getenv("ATTACK_HOST_PID")); err == nil {
		detail += fmt.Sprintf("; kill(%d,0): %v", pid, unix.Kill(pid, 0))
	}
	report("blocked", detail)
}

// control: the same search of the host's /proc finds the victim.
func control() { probe.AttackReaches(name, nil, nil) }

func report(result, detail string) { probe.Report(name, result, detail) }

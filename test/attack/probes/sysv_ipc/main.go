//go:build linux

// Probe sysv_ipc looks for a System V shared-memory segment the host
// created with a known key (IPC namespace isolation).
package main

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "sysv_ipc"

func main() { probe.Run(name, attack, control) }

func attack() {
	key, err := strconv.Atoi(os.Getenv("ATTACK_SHM_KEY"))
	if err != nil {
		report("error", "ATTACK_SHM_KEY not set")
	}
	id, err := unix.SysvShmGet(key, 0, 0)
	if err == nil {
		report("allowed", fmt.Sprintf("host shm segment visible (id %d)", id))
	}
	report("blocked", fmt.Sprintf("shmget(%#x): %v", key, err))
}

// control: outside a sandbox the host's segment is found by its key.
func control() { probe.AttackReaches(name, nil, nil) }

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe signal_host tries to signal a host process: by its host pid (only
// when that pid, as seen here, really is the victim, so sandbox processes
// are never hit), with kill(-1) and through a pidfd. The test also checks
// from the host that the victim is still alive.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "signal_host"

func main() { probe.Run(name, attack, control) }

func attack() {
	token := os.Getenv("ATTACK_VICTIM_TOKEN")
	pid, err := strconv.Atoi(os.Getenv("ATTACK_HOST_PID"))
	if err != nil || token == "" {
		report("error", "ATTACK_HOST_PID/ATTACK_VICTIM_TOKEN not set")
	}
	b, rerr := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if rerr == nil && strings.Contains(string(b), token) {
		if err := unix.Kill(pid, unix.SIGTERM); err == nil {
			report("allowed", "sent SIGTERM to host victim")
		}
	}
	var notes []string
	if fd, err := unix.PidfdOpen(pid, 0); err == nil {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
		notes = append(notes, "pidfd_open ok: "+strings.ReplaceAll(string(b), "\n", " "))
		unix.Close(fd)
	} else {
		notes = append(notes, "pidfd_open: "+err.Error())
	}
	// kill(-1) reaches every process the caller may signal; SIGCONT is harmless.
	notes = append(notes, fmt.Sprintf("kill(-1,SIGCONT): %v", unix.Kill(-1, unix.SIGCONT)))
	notes = append(notes, fmt.Sprintf("kill(%d,0): %v", pid, unix.Kill(pid, 0)))
	report("blocked", "host victim not signalled; "+strings.Join(notes, "; "))
}

// control: outside a sandbox the victim is there at its host pid and may
// be signalled (signal 0: the permission check only, nothing is sent; the
// battery needs its victim alive).
func control() {
	token := os.Getenv("ATTACK_VICTIM_TOKEN")
	pid, err := strconv.Atoi(os.Getenv("ATTACK_HOST_PID"))
	if err != nil || token == "" {
		report(probe.Error, "ATTACK_HOST_PID/ATTACK_VICTIM_TOKEN not set")
	}
	b, rerr := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if rerr != nil || !strings.Contains(string(b), token) {
		report(probe.Unreachable, fmt.Sprintf("pid %d is not the victim: %v %q", pid, rerr, b))
	}
	if err := unix.Kill(pid, 0); err != nil {
		report(probe.Unreachable, fmt.Sprintf("kill(%d, 0): %v", pid, err))
	}
	report(probe.Reachable, fmt.Sprintf("outside a sandbox the victim (pid %d) may be signalled (kill with signal 0)", pid))
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe proc_root_escape walks /proc/<pid>/root, /cwd and /fd of every
// visible process looking for one whose root or working directory is
// outside the sandbox (the host canary reachable through it).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "proc_root_escape"

func main() { probe.Run(name, attack, control) }

func attack() {
	canary, token := os.Getenv("ATTACK_HOST_CANARY"), os.Getenv("ATTACK_TOKEN")
	if canary == "" || token == "" {
		report("error", "ATTACK_HOST_CANARY/ATTACK_TOKEN not set")
	}
	pids, _ := filepath.Glob("/proc/[0-9]*")
	var links []string
	for _, p := range pids {
		for _, l := range []string{p + "/root", p + "/cwd"} {
			for _, suffix := range []string{canary, "/../../../../../../../.." + canary} {
				if b, err := os.ReadFile(l + suffix); err == nil && strings.Contains(string(b), token) {
					report("allowed", "host canary via "+l+suffix)
				}
			}
		}
		fds, _ := filepath.Glob(p + "/fd/*")
		for _, fd := range fds {
			if fi, err := os.Stat(fd); err == nil && fi.IsDir() {
				if b, err := os.ReadFile(fd + "/../../../../../../../../.." + canary); err == nil && strings.Contains(string(b), token) {
					report("allowed", "host canary via directory fd "+fd)
				}
				t, _ := os.Readlink(fd)
				links = append(links, fd+"->"+t)
			}
		}
	}
	report("blocked", fmt.Sprintf("%d processes checked; directory fds: %v", len(pids), links))
}

// control: the same walk of the host's /proc reaches the host canary
// (through this process's own root).
func control() { probe.AttackReaches(name, nil, nil) }

func report(result, detail string) { probe.Report(name, result, detail) }

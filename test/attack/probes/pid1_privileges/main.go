//go:build linux

// Probe pid1_privileges reads the status of every thread of the
// sandbox's PID 1, as a container scanner does ("CAP_SYS_ADMIN held by
// PID 1"): any capability in any set (inheritable, permitted, effective,
// bounding, ambient), no no_new_privs or no seccomp filter there is a
// privilege left inside the sandbox's PID namespace, one kernel bug away
// from an escape.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "pid1_privileges"

func main() { probe.Run(name, attack, control) }

// held returns what PID 1's threads hold (empty: nothing) and how many
// threads were read.
func held() ([]string, int) {
	tasks, _ := filepath.Glob("/proc/1/task/*/status")
	var out []string
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(l, ":")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			switch {
			case strings.HasPrefix(k, "Cap"):
				if v != "0000000000000000" {
					out = append(out, fmt.Sprintf("%s %s=%s", filepath.Base(filepath.Dir(p)), k, v))
				}
			case k == "NoNewPrivs" && v != "1":
				out = append(out, fmt.Sprintf("%s NoNewPrivs=%s", filepath.Base(filepath.Dir(p)), v))
			case k == "Seccomp" && v != "2":
				out = append(out, fmt.Sprintf("%s Seccomp=%s", filepath.Base(filepath.Dir(p)), v))
			}
		}
	}
	return out, len(tasks)
}

// summary is the first few of what h lists.
func summary(h []string) string {
	if len(h) > 5 {
		return strings.Join(h[:5], "; ") + fmt.Sprintf("; and %d more", len(h)-5)
	}
	return strings.Join(h, "; ")
}

func attack() {
	h, n := held()
	if n == 0 {
		report("error", "no /proc/1/task/*/status to read")
	}
	if len(h) > 0 {
		report("allowed", fmt.Sprintf("PID 1 (%d threads) holds: %s", n, summary(h)))
	}
	report("blocked", fmt.Sprintf("PID 1 (%d threads): no capability in any set, no_new_privs, seccomp filter", n))
}

// control: on the host, PID 1 is the machine's init, which holds
// capabilities: the same read reports them.
func control() {
	h, n := held()
	if n == 0 {
		report(probe.Unreachable, "no /proc/1/task/*/status to read on the host")
	}
	if len(h) > 0 {
		report(probe.Reachable, fmt.Sprintf("the host's PID 1 (%d threads) holds: %s", n, summary(h)))
	}
	report(probe.NotApplicable, "the host's own PID 1 holds no capability, so the check cannot tell")
}

func report(result, detail string) { probe.Report(name, result, detail) }

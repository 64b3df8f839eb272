//go:build linux

// Probe pid1_privileges reads the status of every thread of the
// sandbox's PID 1, and of every other process it can see but itself, as a container scanner does ("CAP_SYS_ADMIN held by
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

// fields are the lines of a task's status that the check reads: a task
// whose status lacks one is counted as holding it (the check cannot tell
// otherwise).
var fields = []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"}

// held returns what the threads of PID 1, and of every other process
// visible but this one, hold (empty: nothing), and how many threads were
// read. A thread whose status cannot be read, or lacks a field, counts as
// holding that.
func held() ([]string, int) {
	tasks, _ := filepath.Glob("/proc/[0-9]*/task/*/status")
	self := fmt.Sprintf("/proc/%d/", os.Getpid())
	var out []string
	n := 0
	for _, p := range tasks {
		if strings.HasPrefix(p, self) {
			continue
		}
		id := strings.TrimPrefix(filepath.Dir(p), "/proc/")
		b, err := os.ReadFile(p)
		if err != nil {
			if os.IsNotExist(err) {
				continue // the task ended since the glob
			}
			out = append(out, fmt.Sprintf("%s unreadable (%v)", id, err))
			continue
		}
		n++
		got := map[string]bool{}
		for _, l := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(l, ":")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			got[k] = true
			switch {
			case strings.HasPrefix(k, "Cap"):
				if v != "0000000000000000" {
					out = append(out, fmt.Sprintf("%s %s=%s", id, k, v))
				}
			case k == "NoNewPrivs" && v != "1":
				out = append(out, fmt.Sprintf("%s NoNewPrivs=%s", id, v))
			case k == "Seccomp" && v != "2":
				out = append(out, fmt.Sprintf("%s Seccomp=%s", id, v))
			}
		}
		for _, f := range fields {
			if !got[f] {
				out = append(out, fmt.Sprintf("%s has no %s line in its status (cannot tell)", id, f))
			}
		}
	}
	if _, err := os.Stat("/proc/1/status"); err != nil {
		out = append(out, "PID 1 unreadable: "+err.Error())
	}
	return out, n
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
		report("error", "no process status to read")
	}
	if len(h) > 0 {
		report("allowed", fmt.Sprintf("PID 1 and the other processes (%d threads) hold: %s", n, summary(h)))
	}
	report("blocked", fmt.Sprintf("PID 1 and the other processes (%d threads): no capability in any set, no_new_privs, seccomp filter", n))
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

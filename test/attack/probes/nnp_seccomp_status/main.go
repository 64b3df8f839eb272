//go:build linux

// Probe nnp_seccomp_status checks that the process runs with
// no_new_privs set and a seccomp filter installed (mode 2), as
// /proc/self/status reports them.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "nnp_seccomp_status"

func main() { probe.Run(name, attack, control) }

// status reads the fields and whether both are set.
func status() (bool, string) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		report("error", err.Error())
	}
	f := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			f[k] = strings.TrimSpace(v)
		}
	}
	return f["NoNewPrivs"] == "1" && f["Seccomp"] == "2", fmt.Sprintf("NoNewPrivs=%s Seccomp=%s Seccomp_filters=%s", f["NoNewPrivs"], f["Seccomp"], f["Seccomp_filters"])
}

func attack() {
	both, detail := status()
	if !both {
		report("allowed", detail)
	}
	report("blocked", detail)
}

// control: outside a sandbox a process runs without them, and the check
// tells so.
func control() {
	both, detail := status()
	if !both {
		report(probe.Reachable, "outside a sandbox: "+detail)
	}
	report(probe.NotApplicable, "this process already runs with no_new_privs and a seccomp filter outside any sandbox, so the check cannot tell a sandbox's from the host's: "+detail)
}

func report(result, detail string) { probe.Report(name, result, detail) }

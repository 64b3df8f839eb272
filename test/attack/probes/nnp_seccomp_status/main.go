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

func main() {
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
	detail := fmt.Sprintf("NoNewPrivs=%s Seccomp=%s Seccomp_filters=%s", f["NoNewPrivs"], f["Seccomp"], f["Seccomp_filters"])
	if f["NoNewPrivs"] != "1" || f["Seccomp"] != "2" {
		report("allowed", detail)
	}
	report("blocked", detail)
}

func report(result, detail string) { probe.Report(name, result, detail) }

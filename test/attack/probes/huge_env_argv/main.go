//go:build linux

// Probe huge_env_argv reports how much argv and environment reached it.
// The runner starts it with an enormous argv/environment: agentkernel
// must refuse cleanly (E2BIG, exit 126) or pass it through, and stay
// healthy either way; the runner judges the result.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "huge_env_argv"

func main() { probe.Run(name, attack, control) }

func attack() {
	a, e := 0, 0
	for _, s := range os.Args {
		a += len(s) + 1
	}
	for _, s := range os.Environ() {
		e += len(s) + 1
	}
	report("allowed", fmt.Sprintf("received %d args (%d bytes) and %d env entries (%d bytes)", len(os.Args), a, len(os.Environ()), e))
}

// control, scaled down: outside a sandbox the probe started with 1 MiB of
// argv (under ARG_MAX) receives and measures all of it, so its report in
// a sandbox says what reached it.
func control() {
	arg := strings.Repeat("A", 128<<10-1)
	a := probe.AttackOnHost(func(c *exec.Cmd) {
		for i := 0; i < 8; i++ {
			c.Args = append(c.Args, arg)
		}
	})
	if a.Result == "allowed" && strings.HasPrefix(a.Detail, "received 9 args (1048") {
		report(probe.Reachable, "outside a sandbox 1 MiB of argv reaches the probe: "+a.Detail)
	}
	report(probe.Unreachable, a.Result+": "+a.Detail)
}

func report(result, detail string) { probe.Report(name, result, detail) }

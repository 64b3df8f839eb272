//go:build linux

// Probe huge_env_argv reports how much argv and environment reached it.
// The runner starts it with an enormous argv/environment: agentkernel
// must refuse cleanly (E2BIG, exit 126) or pass it through, and stay
// healthy either way; the runner judges the result.
package main

import (
	"fmt"
	"os"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "huge_env_argv"

func main() {
	a, e := 0, 0
	for _, s := range os.Args {
		a += len(s) + 1
	}
	for _, s := range os.Environ() {
		e += len(s) + 1
	}
	report("allowed", fmt.Sprintf("received %d args (%d bytes) and %d env entries (%d bytes)", len(os.Args), a, len(os.Environ()), e))
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe output_flood writes 1 GiB to stdout (lines of 64 KiB) and then its
// report. The runner judges it: agentkernel's memory must stay flat while
// it forwards the flood.
package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "output_flood"

func main() { probe.Run(name, attack, control) }

func attack() {
	total := 1 << 30
	if v, err := strconv.Atoi(os.Getenv("ATTACK_FLOOD_BYTES")); err == nil {
		total = v
	}
	line := append(bytes.Repeat([]byte("A"), 64<<10-1), '\n')
	chunk := bytes.Repeat(line, 16) // 1 MiB
	written := 0
	for written < total {
		n, err := os.Stdout.Write(chunk)
		written += n
		if err != nil {
			report("blocked", fmt.Sprintf("stdout closed after %d bytes: %v", written, err))
		}
	}
	report("allowed", fmt.Sprintf("wrote %d bytes", written))
}

// control, scaled down: outside a sandbox the probe floods a pipe with
// what it says it wrote (16 MiB here).
func control() {
	const want = 16 << 20
	a := probe.AttackOnHost(func(c *exec.Cmd) { c.Env = append(c.Env, "ATTACK_FLOOD_BYTES="+strconv.Itoa(want)) })
	if a.Result == "allowed" && a.Output >= want {
		report(probe.Reachable, fmt.Sprintf("outside a sandbox %d bytes arrived through a pipe (%s)", a.Output, a.Detail))
	}
	report(probe.Unreachable, fmt.Sprintf("%s after %d bytes: %s", a.Result, a.Output, a.Detail))
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe output_flood writes 1 GiB to stdout (lines of 64 KiB) and then its
// report. The runner judges it: agentkernel's memory must stay flat while
// it forwards the flood.
package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "output_flood"

func main() {
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

func report(result, detail string) { probe.Report(name, result, detail) }

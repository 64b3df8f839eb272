//go:build linux

// Probe ioperm tries to get direct access to I/O ports (ioperm, iopl).
// attack and control are per architecture: only x86 has those system
// calls.
package main

import (
	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "ioperm"

func main() { probe.Run(name, attack, control) }

func report(result, detail string) { probe.Report(name, result, detail) }

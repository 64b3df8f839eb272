//go:build linux

// Probe write_root tries to create a file in the root filesystem. The
// restrictive profile's root is read-only; permissive and moderate have a
// per-run writable layer (documented; the image layers stay untouched,
// which write_lower_layer and the host-side layer check verify).
package main

import (
	"os"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "write_root"

func main() {
	for _, p := range []string{"/attack-root-write", "/bin/attack-root-write", "/etc/attack-root-write"} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err == nil {
			report("allowed", "created "+p)
		} else if p == "/etc/attack-root-write" {
			report("blocked", err.Error())
		}
	}
}

func report(result, detail string) { probe.Report(name, result, detail) }

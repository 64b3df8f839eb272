//go:build linux

// Probe write_root tries to create a file in the root filesystem. The
// restrictive profile's root is read-only; permissive and moderate have a
// per-run writable layer (documented; the image layers stay untouched,
// which write_lower_layer and the host-side layer check verify).
package main

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "write_root"

func main() { probe.Run(name, attack, control) }

func attack() {
	for _, p := range []string{"/attack-root-write", "/bin/attack-root-write", "/etc/attack-root-write"} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err == nil {
			report("allowed", "created "+p)
		} else if p == "/etc/attack-root-write" {
			report("blocked", err.Error())
		}
	}
}

// control: outside a sandbox the image's root directory (its base layer
// on the host, which the sandbox's root is made of) is writable by this
// user (access(2) with W_OK; nothing is created).
func control() {
	d := os.Getenv("ATTACK_LAYER_DIR")
	if err := unix.Faccessat(unix.AT_FDCWD, d, unix.W_OK, unix.AT_EACCESS); err != nil {
		report(probe.Unreachable, d+": "+err.Error())
	}
	report(probe.Reachable, "the image's root directory is writable outside a sandbox")
}

func report(result, detail string) { probe.Report(name, result, detail) }

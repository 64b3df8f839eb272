//go:build linux

// Probe read_data_dir tries to read agentkernel's data directory (image
// layers, run state): a canary the test placed at its top, and a listing.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "read_data_dir"

func main() { probe.Run(name, attack, control) }

func attack() {
	dir, token := os.Getenv("ATTACK_DATA_DIR"), os.Getenv("ATTACK_TOKEN")
	if dir == "" || token == "" {
		report("error", "ATTACK_DATA_DIR/ATTACK_TOKEN not set")
	}
	var errs []string
	for _, p := range []string{dir, "/proc/1/root" + dir} {
		b, err := os.ReadFile(filepath.Join(p, "attack-canary"))
		if err == nil && strings.Contains(string(b), token) {
			report("allowed", "read data dir canary via "+p)
		}
		if err != nil {
			errs = append(errs, err.Error())
		}
		if ents, err := os.ReadDir(p); err == nil && len(ents) > 0 {
			report("allowed", fmt.Sprintf("listed %s: %d entries", p, len(ents)))
		}
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: outside a sandbox the data directory's canary reads.
func control() { probe.AttackReaches(name, nil, nil) }

func report(result, detail string) { probe.Report(name, result, detail) }

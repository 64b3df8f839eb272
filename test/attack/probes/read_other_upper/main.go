//go:build linux

// Probe read_other_upper tries to read a secret that another, concurrently
// running sandbox wrote into its own writable layer: by the host path of
// that sandbox's upper dir (the test finds it from the host), through
// /proc/*/root of every visible process, and by searching the data dir.
package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "read_other_upper"

func main() { probe.Run(name, attack, control) }

func attack() {
	secret, token := os.Getenv("ATTACK_OTHER_SECRET"), os.Getenv("ATTACK_OTHER_TOKEN")
	if secret == "" || token == "" {
		report("error", "ATTACK_OTHER_SECRET/ATTACK_OTHER_TOKEN not set")
	}
	base := filepath.Base(secret)
	try := func(p string) {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), token) {
			report("allowed", "read other sandbox's secret via "+p)
		}
	}
	if up := os.Getenv("ATTACK_OTHER_UPPER"); up != "" {
		try(filepath.Join(up, secret))
		try(filepath.Join(up, base))
	}
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range pids {
		try(filepath.Join(p, "root", secret))
	}
	if dd := os.Getenv("ATTACK_DATA_DIR"); dd != "" {
		n := 0
		_ = filepath.WalkDir(dd, func(p string, d fs.DirEntry, err error) error {
			if n++; n > 20000 {
				return filepath.SkipAll
			}
			if err == nil && d.Name() == base {
				try(p)
			}
			return nil
		})
	}
	report("blocked", fmt.Sprintf("secret %s not found (searched %d /proc roots)", base, len(pids)))
}

// control: outside a sandbox the other sandbox's secret reads where the
// test found it from the host (its /proc/<pid>/root): the other sandbox
// is up and its secret is there to steal.
func control() { probe.AttackReaches(name, nil, nil) }

func report(result, detail string) { probe.Report(name, result, detail) }

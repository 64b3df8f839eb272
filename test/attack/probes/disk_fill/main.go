//go:build linux

// Probe disk_fill writes 1 MiB blocks into each writable filesystem of the
// sandbox in turn (the root's writable layer via /etc, then /tmp) until a
// write fails or a cap is reached. "blocked": ENOSPC/EDQUOT/EFBIG (or the
// memory limit, which the runner sees as SIGKILL) stopped every one below
// the cap. Each file is removed before the next.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "disk_fill"

func main() {
	capMB := 4096
	if v, err := strconv.Atoi(os.Getenv("ATTACK_DISK_CAP_MB")); err == nil {
		capMB = v
	}
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i)
	}
	var notes []string
	for _, p := range []string{"/etc/attack-fill", "/tmp/attack-fill"} {
		f, err := os.Create(p)
		if err != nil {
			notes = append(notes, err.Error())
			continue
		}
		mb := 0
		for ; mb < capMB; mb++ {
			if _, err = f.Write(block); err != nil {
				break
			}
		}
		f.Close()
		os.Remove(p)
		if err == nil {
			report("allowed", fmt.Sprintf("wrote %d MiB (the cap) to %s", capMB, p))
		}
		notes = append(notes, fmt.Sprintf("%s full after %d MiB: %v", p, mb, err))
	}
	report("blocked", strings.Join(notes, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe dev_inventory lists every device node under /dev and reports any
// beyond the minimal set (null, zero, full, random, urandom, tty, ptmx,
// pts/*, console when it is a pty).
package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "dev_inventory"

var allowed = map[string]bool{"/dev/null": true, "/dev/zero": true, "/dev/full": true, "/dev/random": true,
	"/dev/urandom": true, "/dev/tty": true, "/dev/ptmx": true, "/dev/pts/ptmx": true}

func main() { probe.Run(name, attack, control) }

// scan lists the device nodes under /dev beyond the minimal set.
func scan() (extra, all []string) {
	filepath.WalkDir("/dev", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&(fs.ModeDevice|fs.ModeCharDevice) == 0 {
			return nil
		}
		fi, err := os.Stat(p)
		if err != nil {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		major := (st.Rdev >> 8) & 0xfff
		desc := fmt.Sprintf("%s(%d:%d)", p, major, st.Rdev&0xff|(st.Rdev>>12)&^0xff)
		all = append(all, desc)
		// 136-143 are pty slaves (pts/N, and /dev/console when bound to one).
		if allowed[p] || (major >= 136 && major <= 143) {
			return nil
		}
		extra = append(extra, desc)
		return nil
	})
	return extra, all
}

func attack() {
	extra, all := scan()
	if len(extra) > 0 {
		report("allowed", "unexpected device nodes: "+strings.Join(extra, " "))
	}
	report("blocked", "only "+strings.Join(all, " "))
}

// control: the host's /dev holds more than the minimal set, and the same
// scan finds it.
func control() {
	extra, all := scan()
	if len(extra) > 0 {
		report(probe.Reachable, fmt.Sprintf("outside a sandbox /dev holds %d nodes beyond the minimal set, e.g. %s", len(extra), extra[0]))
	}
	report(probe.NotApplicable, "this machine's /dev holds only the minimal set: "+strings.Join(all, " "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe landlock_fence isolates the Landlock fence: as root with
// CAP_DAC_OVERRIDE on a writable root (permissive, moderate) nothing but
// Landlock stops it from creating new top-level entries or writing under
// /proc and /dev; in restrictive the root is read-only as well. Any
// success means Landlock is off.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "landlock_fence"

func main() {
	var errs []string
	d := fmt.Sprintf("/attack-landlock-%d", os.Getpid())
	if err := os.Mkdir(d, 0o755); err == nil {
		os.Remove(d)
		report("allowed", "created the top-level directory "+d)
	} else {
		errs = append(errs, err.Error())
	}
	f := d + ".file"
	if err := os.WriteFile(f, nil, 0o644); err == nil {
		os.Remove(f)
		report("allowed", "created the top-level file "+f)
	} else {
		errs = append(errs, err.Error())
	}
	if err := os.Symlink("/", d+".link"); err == nil {
		os.Remove(d + ".link")
		report("allowed", "created a top-level symlink")
	} else {
		errs = append(errs, err.Error())
	}
	report("blocked", strings.Join(errs, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe landlock_fence creates new entries at the top of the root. A
// writable root (permissive, moderate) takes them, as a docker
// container's does: Landlock grants the whole writable layer (device
// nodes and device ioctls aside). In restrictive the root is read-only
// and Landlock grants it read and execute only: any success there means
// both fences are off.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "landlock_fence"

func main() { probe.Run(name, attack, control) }

// try creates a directory, a file and a symlink at top, removing each.
func try(top string) (string, []string) {
	var errs []string
	d := filepath.Join(top, fmt.Sprintf("attack-landlock-%d", os.Getpid()))
	if err := os.Mkdir(d, 0o755); err == nil {
		os.Remove(d)
		return "created the top-level directory " + d, nil
	} else {
		errs = append(errs, err.Error())
	}
	f := d + ".file"
	if err := os.WriteFile(f, nil, 0o644); err == nil {
		os.Remove(f)
		return "created the top-level file " + f, nil
	} else {
		errs = append(errs, err.Error())
	}
	if err := os.Symlink("/", d+".link"); err == nil {
		os.Remove(d + ".link")
		return "created a top-level symlink", nil
	} else {
		errs = append(errs, err.Error())
	}
	return "", errs
}

func attack() {
	got, errs := try("/")
	if got != "" {
		report("allowed", got)
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: outside a sandbox, in a directory this user may write, the
// same entries are created (nothing but file permissions governs them
// there; in the sandbox Landlock alone refuses them). It notes the
// Landlock ABI the kernel offers the sandbox.
func control() {
	dir, err := os.MkdirTemp("", "attack-landlock-control-")
	if err != nil {
		report(probe.Error, err.Error())
	}
	got, errs := try(dir)
	os.RemoveAll(dir)
	abi, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, 1 /* LANDLOCK_CREATE_RULESET_VERSION */)
	landlock := fmt.Sprintf("Landlock ABI %d", abi)
	if e != 0 {
		landlock = "no Landlock: " + e.Error()
	}
	if got != "" {
		report(probe.Reachable, got+" outside a sandbox ("+landlock+")")
	}
	report(probe.Unreachable, strings.Join(errs, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

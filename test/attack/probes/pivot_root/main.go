//go:build linux

// Probe pivot_root tries pivot_root(2) and chroot-free root changes
// (move_mount of /) from inside the sandbox.
package main

import (
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "pivot_root"

func main() {
	runtime.LockOSThread()
	dir, err := os.MkdirTemp("", "attack-pivot")
	if err != nil {
		dir = "/dev/shm/attack-pivot"
		os.MkdirAll(dir, 0o755)
	}
	os.MkdirAll(dir+"/old", 0o755)
	var errs []string
	if err := unix.PivotRoot(dir, dir+"/old"); err == nil {
		report("allowed", "pivot_root succeeded")
	} else {
		errs = append(errs, "pivot_root: "+err.Error())
	}
	if err := unix.PivotRoot(".", "."); err == nil {
		report("allowed", "pivot_root(.,.) succeeded")
	} else {
		errs = append(errs, "pivot_root(.,.): "+err.Error())
	}
	if fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.AT_RECURSIVE); err == nil {
		unix.Close(fd)
		report("allowed", "open_tree(/, CLONE) succeeded")
	} else {
		errs = append(errs, "open_tree: "+err.Error())
	}
	report("blocked", strings.Join(errs, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

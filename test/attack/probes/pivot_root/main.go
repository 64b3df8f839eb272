//go:build linux

// Probe pivot_root tries pivot_root(2) and chroot-free root changes
// (open_tree of / as a detached clone) from inside the sandbox. Any answer
// but EPERM/EACCES/ENOSYS means the call got past its capability check
// (pivot_root checks that before it looks at its arguments).
package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "pivot_root"

func main() { probe.Run(name, attack, control) }

func try() (string, []string) {
	runtime.LockOSThread()
	dir, err := os.MkdirTemp("", "attack-pivot")
	if err != nil {
		dir = "/dev/shm/attack-pivot"
		os.MkdirAll(dir, 0o755)
	}
	os.MkdirAll(dir+"/old", 0o755)
	var errs []string
	if err := unix.PivotRoot(dir, dir+"/old"); probe.PastGate(err) {
		return fmt.Sprintf("pivot_root got past its capability check (%v)", probe.Errno(err)), nil
	} else {
		errs = append(errs, "pivot_root: "+err.Error())
	}
	if err := unix.PivotRoot(".", "."); probe.PastGate(err) {
		return fmt.Sprintf("pivot_root(.,.) got past its capability check (%v)", probe.Errno(err)), nil
	} else {
		errs = append(errs, "pivot_root(.,.): "+err.Error())
	}
	if fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.AT_RECURSIVE); err == nil {
		unix.Close(fd)
		return "open_tree(/, CLONE) succeeded", nil
	} else {
		errs = append(errs, "open_tree: "+err.Error())
	}
	return "", errs
}

func attack() {
	got, errs := try()
	if got != "" {
		report("allowed", got)
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: the same calls outside a sandbox, in a private mount namespace
// of their own (and a user namespace of its own for an unprivileged user).
func control() {
	probe.Isolated(name, unix.CLONE_NEWNS, func() {
		if err := probe.PrivateMounts(); err != nil {
			report(probe.Error, "making mounts private: "+err.Error())
		}
		got, errs := try()
		if got != "" {
			report(probe.Reachable, got+" outside a sandbox")
		}
		report(probe.Unreachable, strings.Join(errs, "; "))
	})
}

func report(result, detail string) { probe.Report(name, result, detail) }

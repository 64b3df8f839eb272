//go:build linux

// Probe setns tries to enter other namespaces through /proc/<pid>/ns
// links of every visible process (only a namespace different from its own
// would matter; the call needs CAP_SYS_ADMIN either way).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "setns"

func main() {
	runtime.LockOSThread()
	var errs []string
	links, _ := filepath.Glob("/proc/[0-9]*/ns/*")
	seen := map[string]bool{}
	for _, l := range links {
		kind := filepath.Base(l)
		if kind == "mnt" || kind == "user" || kind == "pid_for_children" || kind == "time_for_children" {
			continue // need a single-threaded caller; net/uts/ipc/cgroup suffice to test the gate
		}
		target, _ := os.Readlink(l)
		if seen[target] {
			continue
		}
		seen[target] = true
		fd, err := unix.Open(l, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errs = append(errs, l+": "+err.Error())
			continue
		}
		err = unix.Setns(fd, 0)
		unix.Close(fd)
		if err == nil {
			report("allowed", "setns into "+l+" ("+target+") succeeded")
		}
		errs = append(errs, kind+": "+err.Error())
	}
	report("blocked", fmt.Sprintf("%d namespaces tried: %s", len(seen), strings.Join(errs, "; ")))
}

func report(result, detail string) { probe.Report(name, result, detail) }

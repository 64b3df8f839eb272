//go:build linux

// Probe mount_fs tries to mount filesystems inside the sandbox: a tmpfs, a
// fresh (unmasked) procfs, sysfs, a cgroup v1 hierarchy (the release_agent
// escape needs one) and a bind of /.
package main

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "mount_fs"

func main() {
	base, err := os.MkdirTemp("", "attack-mnt")
	if err != nil {
		base = "/dev/shm"
	}
	var errs []string
	for _, m := range []struct{ src, fstype, data string }{
		{"tmpfs", "tmpfs", ""}, {"proc", "proc", ""}, {"sysfs", "sysfs", ""},
		{"cgroup", "cgroup", "memory"}, {"cgroup2", "cgroup2", ""}, {"/", "", ""},
	} {
		dir := base + "/" + m.src
		os.MkdirAll(dir, 0o755)
		var flags uintptr
		if m.fstype == "" {
			flags = unix.MS_BIND | unix.MS_REC
		}
		if err := unix.Mount(m.src, dir, m.fstype, flags, m.data); err == nil {
			unix.Unmount(dir, unix.MNT_DETACH)
			report("allowed", "mounted "+m.src+" ("+m.fstype+")")
		} else {
			errs = append(errs, m.src+": "+err.Error())
		}
	}
	for _, call := range []string{"fsopen"} {
		if fd, err := unix.Fsopen("tmpfs", 0); err == nil {
			unix.Close(fd)
			report("allowed", call+"(tmpfs) succeeded")
		} else {
			errs = append(errs, call+": "+err.Error())
		}
	}
	report("blocked", strings.Join(errs, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

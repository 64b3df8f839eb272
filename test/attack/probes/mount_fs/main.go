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

func main() { probe.Run(name, attack, control) }

// try mounts each in turn (unmounting what it mounted) and returns the
// first that worked.
func try() (string, []string) {
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
			return "mounted " + m.src + " (" + m.fstype + ")", nil
		} else {
			errs = append(errs, m.src+": "+err.Error())
		}
	}
	if fd, err := unix.Fsopen("tmpfs", 0); err == nil {
		unix.Close(fd)
		return "fsopen(tmpfs) succeeded", nil
	} else {
		errs = append(errs, "fsopen: "+err.Error())
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

// control: the same mounts outside a sandbox, in a private mount
// namespace of their own (in a user namespace of its own for an
// unprivileged user, as a rootless sandbox's root has one).
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

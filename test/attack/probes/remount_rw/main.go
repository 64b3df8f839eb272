//go:build linux

// Probe remount_rw tries to remount read-only parts of the sandbox
// read-write: /proc/sys, /sys and the root (read-only in restrictive).
package main

import (
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "remount_rw"

func main() { probe.Run(name, attack, control) }

func attack() {
	var errs []string
	for _, p := range []string{"/proc/sys", "/sys", "/", "/proc/sysrq-trigger"} {
		for _, flags := range []uintptr{unix.MS_REMOUNT | unix.MS_BIND, unix.MS_REMOUNT} {
			err := unix.Mount("", p, "", flags, "")
			if err == nil {
				report("allowed", "remounted "+p+" read-write")
			}
			errs = append(errs, p+": "+err.Error())
		}
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: outside a sandbox, in a private mount namespace of its own
// (and a user namespace of its own for an unprivileged user), a tmpfs of
// its own made read-only by a bind remount, as /proc/sys is in a sandbox,
// is made writable again by the attack's bind remount. No mount the host
// shares is touched: a plain remount would change a filesystem for every
// namespace, so the control never makes one.
func control() {
	probe.Isolated(name, unix.CLONE_NEWNS, func() {
		if err := probe.PrivateMounts(); err != nil {
			report(probe.Error, "making mounts private: "+err.Error())
		}
		dir, err := os.MkdirTemp("", "attack-remount-control-")
		if err != nil {
			report(probe.Error, err.Error())
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
			report(probe.Unreachable, "mounting a tmpfs: "+err.Error())
		}
		if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			report(probe.Error, "making it read-only: "+err.Error())
		}
		if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err == nil {
			report(probe.Error, "the read-only bind is writable")
		}
		if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND, ""); err != nil {
			report(probe.Unreachable, "bind remount read-write: "+err.Error())
		}
		if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
			report(probe.Unreachable, "remounted, but still not writable: "+err.Error())
		}
		report(probe.Reachable, "outside a sandbox a read-only bind is remounted read-write (a tmpfs of its own, in a private mount namespace)")
	})
}

func report(result, detail string) { probe.Report(name, result, detail) }

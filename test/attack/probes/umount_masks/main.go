//go:build linux

// Probe umount_masks tries to unmount the masks and read-only binds over
// sensitive /proc paths (kcore, sysrq-trigger, /proc/sys, ...), which would
// expose the real files underneath.
package main

import (
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "umount_masks"

func main() { probe.Run(name, attack, control) }

func attack() {
	var errs []string
	for _, p := range []string{"/proc/kcore", "/proc/sysrq-trigger", "/proc/sys", "/proc/keys", "/proc/timer_list", "/sys/firmware", "/proc"} {
		if err := unix.Unmount(p, unix.MNT_DETACH); err == nil {
			report("allowed", "unmounted "+p)
		} else {
			errs = append(errs, p+": "+err.Error())
		}
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: outside a sandbox, in a private mount namespace of its own
// (and a user namespace of its own for an unprivileged user), a mask of
// its own (/dev/null bound over a file, as a sandbox masks /proc/kcore)
// is unmounted the way the attack tries, and the file underneath shows.
func control() {
	probe.Isolated(name, unix.CLONE_NEWNS, func() {
		if err := probe.PrivateMounts(); err != nil {
			report(probe.Error, "making mounts private: "+err.Error())
		}
		dir, err := os.MkdirTemp("", "attack-umount-control-")
		if err != nil {
			report(probe.Error, err.Error())
		}
		p := filepath.Join(dir, "masked")
		if err := os.WriteFile(p, []byte("under the mask\n"), 0o644); err != nil {
			report(probe.Error, err.Error())
		}
		if err := unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
			report(probe.Unreachable, "masking: "+err.Error())
		}
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			report(probe.Unreachable, "unmounting the mask: "+err.Error())
		}
		if b, _ := os.ReadFile(p); string(b) != "under the mask\n" {
			report(probe.Unreachable, "unmounted, but the file underneath does not show")
		}
		report(probe.Reachable, "outside a sandbox a mask (/dev/null bound over a file) is unmounted and the file underneath shows")
	})
}

func report(result, detail string) { probe.Report(name, result, detail) }

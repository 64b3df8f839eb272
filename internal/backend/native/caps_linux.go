package native

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// capNames maps capability names to numbers (capability.h).
var capNames = map[string]uint{
	"CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4,
	"KILL": 5, "SETGID": 6, "SETUID": 7, "SETPCAP": 8, "LINUX_IMMUTABLE": 9,
	"NET_BIND_SERVICE": 10, "NET_BROADCAST": 11, "NET_ADMIN": 12, "NET_RAW": 13,
	"IPC_LOCK": 14, "IPC_OWNER": 15, "SYS_MODULE": 16, "SYS_RAWIO": 17, "SYS_CHROOT": 18,
	"SYS_PTRACE": 19, "SYS_PACCT": 20, "SYS_ADMIN": 21, "SYS_BOOT": 22, "SYS_NICE": 23,
	"SYS_RESOURCE": 24, "SYS_TIME": 25, "SYS_TTY_CONFIG": 26, "MKNOD": 27, "LEASE": 28,
	"AUDIT_WRITE": 29, "AUDIT_CONTROL": 30, "SETFCAP": 31, "MAC_OVERRIDE": 32,
	"MAC_ADMIN": 33, "SYSLOG": 34, "WAKE_ALARM": 35, "BLOCK_SUSPEND": 36, "AUDIT_READ": 37,
	"PERFMON": 38, "BPF": 39, "CHECKPOINT_RESTORE": 40,
}

// capMask turns "CAP_CHOWN"-style names (the prefix and case are
// optional) into a bit mask.
func capMask(names []string) (uint64, error) {
	var m uint64
	for _, n := range names {
		k := strings.TrimPrefix(strings.ToUpper(n), "CAP_")
		if k == "ALL" {
			return ^uint64(0), nil
		}
		c, ok := capNames[k]
		if !ok {
			return 0, fmt.Errorf("unknown capability %q", n)
		}
		m |= 1 << c
	}
	return m, nil
}

// lastCap is the highest capability this kernel knows (CAP_LAST_CAP):
// the highest one PR_CAPBSET_READ does not refuse as invalid (EINVAL).
// Two or three prctl calls; the same number from
// /proc/sys/kernel/cap_last_cap costs a proc sysctl look-up on every
// run (docs/perf-log.md). Any other error counts the capability as
// valid: too high a number makes the drop of a capability that does not
// exist fail the run loudly, too low a one would leave capabilities in
// the bounding set silently.
func lastCap() int {
	valid := func(c int) bool {
		_, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		return !errors.Is(err, unix.EINVAL)
	}
	c := unix.CAP_LAST_CAP // what these headers know: usually the kernel too
	for c > 0 && !valid(c) {
		c--
	}
	for c < 63 && valid(c+1) {
		c++
	}
	return c
}

// dropBoundingSet removes every capability not in keep from the calling
// thread's bounding set, so that no execve can regain it.
func dropBoundingSet(keep uint64) error {
	for c := uint(0); c < 64; c++ {
		if keep&(1<<c) != 0 {
			continue
		}
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past CAP_LAST_CAP
		}
		if err != nil {
			st, _ := os.ReadFile("/proc/self/status")
			return fmt.Errorf("dropping capability %d from the bounding set: %w %s", c, err, st)
		}
	}
	return nil
}

// setCapabilities limits the permitted and effective sets to keep and
// clears the inheritable set. After execve a root command gets exactly
// keep (the bounding set), a non-root command nothing.
func setCapabilities(keep uint64) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for i := range data {
		k := uint32(keep >> (32 * i))
		data[i].Permitted &= k
		data[i].Effective &= k
		data[i].Inheritable = 0
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

package prestart

import "syscall"

// MaskedPaths and ReadonlyPaths follow runc's defaults: kernel
// information and knobs a sandbox has no business reading (masked: an
// empty file or directory over them) or writing (read-only).
var (
	MaskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
		"/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
	}
	ReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// Mask is one of MaskedPaths or ReadonlyPaths that exists on this kernel.
type Mask struct {
	Path string
	Kind int
}

// Kinds of Mask.
const (
	MaskFile     = iota // /dev/null bound over it
	MaskDir             // an empty read-only tmpfs over it
	MaskReadOnly        // bound read-only onto itself
)

// LookupMasks returns the masks under prefix ("/proc/" or "/sys/") that
// exist, looked up in this process's own /proc and /sys: their entries
// are the kernel's, the same in every PID and network namespace's.
func LookupMasks(prefix string) []Mask {
	var masks []Mask
	for _, p := range MaskedPaths {
		var st syscall.Stat_t
		if !hasPrefix(p, prefix) || syscall.Lstat(p, &st) != nil {
			continue
		}
		kind := MaskFile
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			kind = MaskDir
		}
		masks = append(masks, Mask{p, kind})
	}
	for _, p := range ReadonlyPaths {
		var st syscall.Stat_t
		if hasPrefix(p, prefix) && syscall.Lstat(p, &st) == nil {
			masks = append(masks, Mask{p, MaskReadOnly})
		}
	}
	return masks
}

// hasPrefix is strings.HasPrefix: this package keeps its imports to what
// the runtime initialises first.
func hasPrefix(s, prefix string) bool {
	return len(s) >= len(prefix) && s[:len(prefix)] == prefix
}

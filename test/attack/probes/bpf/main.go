//go:build linux

// Probe bpf tries bpf(2): creating a map and loading a socket-filter
// program (eBPF is a large kernel attack surface).
package main

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "bpf"

func main() { probe.Run(name, attack, control) }

// try creates a one-entry array map and loads a two-instruction socket
// filter, closing whatever it gets.
func try() (ok bool, detail string, errs []unix.Errno) {
	// union bpf_attr for BPF_MAP_CREATE: map_type, key_size, value_size, max_entries.
	mapAttr := [4]uint32{2 /* BPF_MAP_TYPE_ARRAY */, 4, 4, 1}
	fd, _, e1 := unix.Syscall(unix.SYS_BPF, 0 /* BPF_MAP_CREATE */, uintptr(unsafe.Pointer(&mapAttr)), unsafe.Sizeof(mapAttr))
	if e1 == 0 {
		unix.Close(int(fd))
		return true, "BPF_MAP_CREATE succeeded", nil
	}
	// "r0 = 0; exit" as a socket filter.
	insns := [2]uint64{0x00000000000000b7, 0x0000000000000095}
	license := []byte("GPL\x00")
	var progAttr struct {
		progType, insnCnt uint32
		insns, license    uint64
		logLevel, logSize uint32
		logBuf            uint64
		kernVersion       uint32
		_                 [100]byte
	}
	progAttr.progType = 1 // BPF_PROG_TYPE_SOCKET_FILTER
	progAttr.insnCnt = 2
	progAttr.insns = uint64(uintptr(unsafe.Pointer(&insns[0])))
	progAttr.license = uint64(uintptr(unsafe.Pointer(&license[0])))
	fd, _, e2 := unix.Syscall(unix.SYS_BPF, 5 /* BPF_PROG_LOAD */, uintptr(unsafe.Pointer(&progAttr)), unsafe.Sizeof(progAttr))
	if e2 == 0 {
		unix.Close(int(fd))
		return true, "BPF_PROG_LOAD succeeded", nil
	}
	return false, fmt.Sprintf("map_create: %v; prog_load: %v", e1, e2), []unix.Errno{e1, e2}
}

func attack() {
	ok, detail, _ := try()
	if ok {
		report("allowed", detail)
	}
	report("blocked", detail)
}

// control: the same map and program outside any sandbox (root holds
// CAP_BPF; an unprivileged user only where the host allows unprivileged
// bpf).
func control() {
	ok, detail, errs := try()
	switch {
	case ok:
		report(probe.Reachable, detail)
	case kernelLacks(errs[0], errs[1]):
		report(probe.NotApplicable, "this kernel has no bpf(2): "+detail)
	case !probe.Privileged() && probe.Sysctl("kernel/unprivileged_bpf_disabled") != "0" && probe.Refused(errs[0]) && probe.Refused(errs[1]):
		report(probe.NotApplicable, fmt.Sprintf("kernel.unprivileged_bpf_disabled=%s: this host gives bpf(2) to no unprivileged user, sandbox or not (%s)", probe.Sysctl("kernel/unprivileged_bpf_disabled"), detail))
	}
	report(probe.Unreachable, detail)
}

func kernelLacks(errs ...error) bool {
	lacks, _ := probe.KernelLacks(errs...)
	return lacks
}

func report(result, detail string) { probe.Report(name, result, detail) }

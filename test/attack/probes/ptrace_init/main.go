//go:build linux

// Probe ptrace_init tries to take over the sandbox's init (PID 1, the
// re-executed agentkernel): PTRACE_SEIZE, /proc/1/mem and
// process_vm_readv.
package main

import (
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "ptrace_init"

func main() { probe.Run(name, attack, control) }

func attack() {
	runtime.LockOSThread()
	var errs []string
	if err := unix.PtraceSeize(1); err == nil {
		unix.PtraceDetach(1)
		report("allowed", "PTRACE_SEIZE of pid 1 succeeded")
	} else {
		errs = append(errs, "seize: "+err.Error())
	}
	if err := unix.PtraceAttach(1); err == nil {
		unix.PtraceDetach(1)
		report("allowed", "PTRACE_ATTACH of pid 1 succeeded")
	} else {
		errs = append(errs, "attach: "+err.Error())
	}
	if f, err := os.Open("/proc/1/mem"); err == nil {
		buf := make([]byte, 16)
		_, rerr := f.ReadAt(buf, 0x400000)
		f.Close()
		if rerr == nil {
			report("allowed", "read /proc/1/mem")
		}
		errs = append(errs, "/proc/1/mem read: "+rerr.Error())
	} else {
		errs = append(errs, "/proc/1/mem: "+err.Error())
	}
	buf := make([]byte, 16)
	local := []unix.Iovec{{Base: &buf[0], Len: 16}}
	remote := []unix.RemoteIovec{{Base: 0x400000, Len: 16}}
	if _, err := unix.ProcessVMReadv(1, local, remote, 0); err == nil {
		report("allowed", "process_vm_readv of pid 1 succeeded")
	} else {
		errs = append(errs, "process_vm_readv: "+err.Error())
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: outside a sandbox, in a PID namespace of its own whose PID 1
// is this probe (never the host's init) with its own /proc, the attack
// seizes that PID 1.
func control() {
	probe.Isolated(name, unix.CLONE_NEWPID|unix.CLONE_NEWNS, func() {
		if err := probe.PrivateMounts(); err != nil {
			report(probe.Error, "making mounts private: "+err.Error())
		}
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			report(probe.Error, "mounting a /proc of the new PID namespace: "+err.Error())
		}
		if os.Getpid() != 1 {
			report(probe.Error, "not PID 1 of a new PID namespace")
		}
		probe.AttackReaches(name, nil, nil)
	})
}

func report(result, detail string) { probe.Report(name, result, detail) }

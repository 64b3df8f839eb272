//go:build linux

// Probe ptrace_traceme starts a child with PTRACE_TRACEME (how debuggers
// and strace start a program). Allowed in permissive (documented), blocked
// in moderate and restrictive.
package main

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "ptrace_traceme"

func main() { probe.Run(name, attack, control) }

func attack() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		os.Exit(0)
	}
	runtime.LockOSThread()
	cmd := exec.Command("/proc/self/exe", "child")
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	err := cmd.Start()
	if err != nil {
		report("blocked", "PTRACE_TRACEME child: "+err.Error())
	}
	cmd.Process.Kill()
	cmd.Wait()
	report("allowed", "child started under PTRACE_TRACEME")
}

// control: the same traced child outside a sandbox.
func control() { probe.AttackReaches(name, nil, nil) }

func report(result, detail string) { probe.Report(name, result, detail) }

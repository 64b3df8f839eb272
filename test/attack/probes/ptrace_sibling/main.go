//go:build linux

// Probe ptrace_sibling tries PTRACE_SEIZE on a process of the same sandbox
// and user (a child it starts). Permissive keeps ptrace for debuggers
// (documented); moderate blocks ptrace by seccomp, restrictive by its
// allow-list.
package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "ptrace_sibling"

func main() { probe.Run(name, attack, control) }

func attack() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		// Stay alive until killed. A bare select{} would not: the Go
		// runtime ends a program whose goroutines all block for ever,
		// and PTRACE_SEIZE of an exiting task fails with EPERM, which
		// would read as "blocked" whatever the profile.
		fmt.Println("ready")
		for {
			time.Sleep(time.Hour)
		}
	}
	runtime.LockOSThread()
	cmd := exec.Command("/proc/self/exe", "child")
	out, err := cmd.StdoutPipe()
	if err != nil {
		report("error", "child stdout: "+err.Error())
	}
	if err := cmd.Start(); err != nil {
		report("error", "start child: "+err.Error())
	}
	defer cmd.Process.Kill()
	// Seize only a child that is running its own code, past exec.
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		cmd.Process.Kill()
		report("error", fmt.Sprintf("child did not start: %q %v", line, err))
	}
	if err := unix.PtraceSeize(cmd.Process.Pid); err != nil {
		cmd.Process.Kill()
		report("blocked", "PTRACE_SEIZE of a sibling: "+err.Error())
	}
	unix.PtraceDetach(cmd.Process.Pid)
	cmd.Process.Kill()
	report("allowed", "PTRACE_SEIZE of a sibling succeeded")
}

// control: the same seizure of its own child outside a sandbox.
func control() { probe.AttackReaches(name, nil, nil) }

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe ptrace_sibling tries PTRACE_SEIZE on a process of the same sandbox
// and user (a child it starts). Permissive keeps ptrace for debuggers
// (documented); moderate blocks ptrace by seccomp, restrictive by its
// allow-list.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

const name = "ptrace_sibling"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		select {}
	}
	runtime.LockOSThread()
	cmd := exec.Command("/proc/self/exe", "child")
	if err := cmd.Start(); err != nil {
		report("error", "start child: "+err.Error())
	}
	defer cmd.Process.Kill()
	if err := unix.PtraceSeize(cmd.Process.Pid); err != nil {
		cmd.Process.Kill()
		report("blocked", "PTRACE_SEIZE of a sibling: "+err.Error())
	}
	unix.PtraceDetach(cmd.Process.Pid)
	cmd.Process.Kill()
	report("allowed", "PTRACE_SEIZE of a sibling succeeded")
}

func report(result, detail string) {
	line, _ := json.Marshal(struct {
		Probe  string `json:"probe"`
		Result string `json:"result"`
		Detail string `json:"detail"`
	}{name, result, detail})
	fmt.Println(string(line))
	os.Exit(0)
}

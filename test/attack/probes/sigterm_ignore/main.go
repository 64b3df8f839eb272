//go:build linux

// Probe sigterm_ignore ignores SIGTERM (and so does a child it starts),
// announces itself and sleeps forever. The runner gives the sandbox a
// short timeout and checks that agentkernel still ends it, promptly, with
// nothing left running.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "sigterm_ignore"

func main() { probe.Run(name, attack, control) }

func attack() {
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if len(os.Args) > 1 && os.Args[1] == "child" {
		sleepForever()
	}
	cmd := exec.Command("/proc/self/exe", "child")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		report("error", "start child: "+err.Error())
	}
	line, _ := json.Marshal(struct {
		Probe  string `json:"probe"`
		Result string `json:"result"`
		Detail string `json:"detail"`
	}{name, "allowed", "ignoring SIGTERM (with a setsid child); only the timeout can end this"})
	fmt.Println(string(line))
	os.Stdout.Sync()
	sleepForever()
}

func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}

// control: outside a sandbox, in a PID namespace of its own (so that its
// end takes the setsid child with it), the attack outlives a SIGTERM:
// only ending all of it, as a sandbox's timeout does, stops it.
func control() {
	probe.Isolated(name, unix.CLONE_NEWPID, func() {
		cmd := exec.Command("/proc/self/exe")
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, probe.ControlEnv+"=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			report(probe.Error, err.Error())
		}
		if err := cmd.Start(); err != nil {
			report(probe.Error, "start the attack: "+err.Error())
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || !strings.Contains(line, "ignoring SIGTERM") {
			report(probe.Unreachable, fmt.Sprintf("the attack did not announce itself: %q %v", line, err))
		}
		cmd.Process.Signal(syscall.SIGTERM)
		time.Sleep(300 * time.Millisecond)
		var ws unix.WaitStatus
		if pid, _ := unix.Wait4(cmd.Process.Pid, &ws, unix.WNOHANG, nil); pid != 0 {
			report(probe.Unreachable, fmt.Sprintf("SIGTERM ended the attack (%v)", ws))
		}
		// Ending PID 1 here ends the whole PID namespace.
		report(probe.Reachable, "outside a sandbox the attack outlives SIGTERM (still running 300 ms after it)")
	})
}

func report(result, detail string) { probe.Report(name, result, detail) }

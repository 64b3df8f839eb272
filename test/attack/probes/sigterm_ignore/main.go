//go:build linux

// Probe sigterm_ignore ignores SIGTERM (and so does a child it starts),
// announces itself and sleeps forever. The runner gives the sandbox a
// short timeout and checks that agentkernel still ends it, promptly, with
// nothing left running.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "sigterm_ignore"

func main() {
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

func report(result, detail string) { probe.Report(name, result, detail) }

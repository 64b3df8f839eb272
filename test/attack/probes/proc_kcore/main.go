//go:build linux

// Probe proc_kcore tries to read kernel memory through /proc/kcore (and
// /proc/kallsyms addresses, which defeat KASLR).
package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "proc_kcore"

func main() { probe.Run(name, attack, control) }

func try() (got string, notes []string, present int) {
	if f, err := os.Open("/proc/kcore"); err == nil {
		present++
		n, rerr := f.Read(make([]byte, 64))
		f.Close()
		if n > 0 {
			return fmt.Sprintf("read %d bytes of /proc/kcore", n), nil, present
		}
		notes = append(notes, fmt.Sprintf("kcore read %d bytes (%v)", n, rerr))
	} else {
		notes = append(notes, err.Error())
		if !errors.Is(err, os.ErrNotExist) {
			present++
		}
	}
	if f, err := os.Open("/proc/kallsyms"); err == nil {
		present++
		s := bufio.NewScanner(f)
		for i := 0; s.Scan() && i < 50; i++ {
			if addr := strings.Fields(s.Text())[0]; strings.Trim(addr, "0") != "" {
				f.Close()
				return "/proc/kallsyms shows kernel addresses", nil, present
			}
		}
		f.Close()
		notes = append(notes, "kallsyms addresses zeroed")
	} else {
		notes = append(notes, err.Error())
		if !errors.Is(err, os.ErrNotExist) {
			present++
		}
	}
	return "", notes, present
}

func attack() {
	got, notes, _ := try()
	if got != "" {
		report("allowed", got)
	}
	report("blocked", strings.Join(notes, "; "))
}

// control: the same reads outside a sandbox.
func control() {
	got, notes, present := try()
	switch {
	case got != "":
		report(probe.Reachable, got+" outside a sandbox")
	case present == 0:
		report(probe.NotApplicable, "this kernel has neither /proc/kcore nor /proc/kallsyms")
	case !probe.Privileged():
		report(probe.NotApplicable, "the kernel shows neither to this user, with or without a sandbox (kernel.kptr_restrict="+probe.Sysctl("kernel/kptr_restrict")+"): "+strings.Join(notes, "; "))
	case probe.Sysctl("kernel/kptr_restrict") == "2":
		report(probe.NotApplicable, "kernel.kptr_restrict=2 and no /proc/kcore: kernel addresses are hidden from everyone here: "+strings.Join(notes, "; "))
	}
	report(probe.Unreachable, strings.Join(notes, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

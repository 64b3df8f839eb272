//go:build linux

// Probe dev_mem tries to read physical and kernel memory and I/O ports
// through /dev/mem, /dev/kmem and /dev/port.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "dev_mem"

func main() { probe.Run(name, attack, control) }

func attack() {
	var errs []string
	for _, p := range []string{"/dev/mem", "/dev/kmem", "/dev/port"} {
		f, err := os.Open(p)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		n, err := f.ReadAt(make([]byte, 16), 0x1000)
		f.Close()
		if n > 0 {
			report("allowed", "read "+p)
		}
		errs = append(errs, fmt.Sprintf("%s read: %v", p, err))
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: outside a sandbox the same nodes open read-only; 16 bytes are
// read from /dev/mem and /dev/kmem in the first megabyte (which even a
// strict /dev/mem allows), never from /dev/port (reading a port can have
// side effects).
func control() {
	var errs []string
	var openErrs []error
	present := 0
	for _, p := range []string{"/dev/mem", "/dev/kmem", "/dev/port"} {
		f, err := os.Open(p)
		if err != nil {
			errs = append(errs, err.Error())
			openErrs = append(openErrs, err)
			if !errors.Is(err, os.ErrNotExist) {
				present++
			}
			continue
		}
		present++
		if p == "/dev/port" {
			f.Close()
			report(probe.Reachable, "/dev/port opens outside a sandbox (not read)")
		}
		n, err := f.ReadAt(make([]byte, 16), 0x1000)
		f.Close()
		if n > 0 {
			report(probe.Reachable, "read "+p+" outside a sandbox")
		}
		errs = append(errs, fmt.Sprintf("%s read: %v", p, err))
	}
	switch {
	case present == 0:
		report(probe.NotApplicable, "this machine has no /dev/mem, /dev/kmem or /dev/port")
	case !probe.Privileged() && len(openErrs) == 3 && probe.RefusedOrAbsent(openErrs...):
		report(probe.NotApplicable, "this user may open none of them, with or without a sandbox: "+strings.Join(errs, "; "))
	}
	report(probe.Unreachable, strings.Join(errs, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

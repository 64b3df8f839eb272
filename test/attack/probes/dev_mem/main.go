//go:build linux

// Probe dev_mem tries to read physical and kernel memory and I/O ports
// through /dev/mem, /dev/kmem and /dev/port.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "dev_mem"

func main() {
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

func report(result, detail string) { probe.Report(name, result, detail) }

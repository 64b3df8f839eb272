//go:build linux

// Probe proc_kcore tries to read kernel memory through /proc/kcore (and
// /proc/kallsyms addresses, which defeat KASLR).
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "proc_kcore"

func main() {
	var notes []string
	if f, err := os.Open("/proc/kcore"); err == nil {
		n, rerr := f.Read(make([]byte, 64))
		f.Close()
		if n > 0 {
			report("allowed", fmt.Sprintf("read %d bytes of /proc/kcore", n))
		}
		notes = append(notes, fmt.Sprintf("kcore read %d bytes (%v)", n, rerr))
	} else {
		notes = append(notes, err.Error())
	}
	if f, err := os.Open("/proc/kallsyms"); err == nil {
		s := bufio.NewScanner(f)
		for i := 0; s.Scan() && i < 50; i++ {
			if addr := strings.Fields(s.Text())[0]; strings.Trim(addr, "0") != "" {
				f.Close()
				report("allowed", "/proc/kallsyms shows kernel addresses")
			}
		}
		f.Close()
		notes = append(notes, "kallsyms addresses zeroed")
	} else {
		notes = append(notes, err.Error())
	}
	report("blocked", strings.Join(notes, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

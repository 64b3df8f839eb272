//go:build linux

// Probe dmesg tries to read the kernel log (syslog(2), /dev/kmsg), which
// leaks kernel addresses and host activity.
package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "dmesg"

func main() {
	buf := make([]byte, 4096)
	n, e1 := unix.Klogctl(3 /* SYSLOG_ACTION_READ_ALL */, buf)
	if e1 == nil && n > 0 {
		report("allowed", fmt.Sprintf("syslog(READ_ALL) returned %d bytes", n))
	}
	var e2 error
	if f, err := os.OpenFile("/dev/kmsg", os.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
		k, rerr := f.Read(buf)
		f.Close()
		if k > 0 {
			report("allowed", "read /dev/kmsg")
		}
		e2 = rerr
	} else {
		e2 = err
	}
	report("blocked", fmt.Sprintf("syslog: %v; /dev/kmsg: %v", e1, e2))
}

func report(result, detail string) { probe.Report(name, result, detail) }

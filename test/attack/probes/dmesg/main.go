//go:build linux

// Probe dmesg tries to read the kernel log (syslog(2), /dev/kmsg), which
// leaks kernel addresses and host activity.
package main

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "dmesg"

func main() { probe.Run(name, attack, control) }

// try reads the kernel log (READ_ALL does not clear it).
func try() (got, detail string) {
	buf := make([]byte, 4096)
	n, e1 := unix.Klogctl(3 /* SYSLOG_ACTION_READ_ALL */, buf)
	if e1 == nil && n > 0 {
		return fmt.Sprintf("syslog(READ_ALL) returned %d bytes", n), ""
	}
	var e2 error
	if f, err := os.OpenFile("/dev/kmsg", os.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
		k, rerr := f.Read(buf)
		f.Close()
		if k > 0 {
			return "read /dev/kmsg", ""
		}
		e2 = rerr
	} else {
		e2 = err
	}
	return "", fmt.Sprintf("syslog: %v; /dev/kmsg: %v", e1, e2)
}

func attack() {
	got, detail := try()
	if got != "" {
		report("allowed", got)
	}
	report("blocked", detail)
}

// control: the same reads outside a sandbox.
func control() {
	got, detail := try()
	switch {
	case got != "":
		report(probe.Reachable, got+" outside a sandbox")
	case !probe.Privileged() && probe.Sysctl("kernel/dmesg_restrict") == "1" && strings.HasPrefix(detail, "syslog: "+unix.EPERM.Error()+";"):
		report(probe.NotApplicable, "kernel.dmesg_restrict=1: unprivileged users cannot read the kernel log on this host, sandbox or not ("+detail+")")
	}
	report(probe.Unreachable, detail)
}

func report(result, detail string) { probe.Report(name, result, detail) }

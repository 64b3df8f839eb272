//go:build linux

// Probe sethostname tries to set the host name and NIS domain name (to
// their current values, so a success changes nothing but proves the
// capability; the sandbox has its own UTS namespace either way).
package main

import (
	"bytes"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "sethostname"

func main() {
	h, _ := os.Hostname()
	e1 := unix.Sethostname([]byte(h))
	var u unix.Utsname
	unix.Uname(&u)
	e2 := unix.Setdomainname(bytes.TrimRight(u.Domainname[:], "\x00"))
	if e1 == nil || e2 == nil {
		report("allowed", fmt.Sprintf("sethostname: %v, setdomainname: %v (own UTS namespace: %q)", e1, e2, h))
	}
	report("blocked", fmt.Sprintf("sethostname: %v; setdomainname: %v", e1, e2))
}

func report(result, detail string) { probe.Report(name, result, detail) }

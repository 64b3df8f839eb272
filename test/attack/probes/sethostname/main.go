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

func main() { probe.Run(name, attack, control) }

func try() (e1, e2 error, h string) {
	h, _ = os.Hostname()
	e1 = unix.Sethostname([]byte(h))
	var u unix.Utsname
	unix.Uname(&u)
	e2 = unix.Setdomainname(bytes.TrimRight(u.Domainname[:], "\x00"))
	return e1, e2, h
}

func attack() {
	e1, e2, h := try()
	if e1 == nil || e2 == nil {
		report("allowed", fmt.Sprintf("sethostname: %v, setdomainname: %v (own UTS namespace: %q)", e1, e2, h))
	}
	report("blocked", fmt.Sprintf("sethostname: %v; setdomainname: %v", e1, e2))
}

// control: the same calls outside a sandbox, in a throwaway UTS namespace
// (and a user namespace of its own for an unprivileged user), so that
// the host's names are never set.
func control() {
	probe.Isolated(name, unix.CLONE_NEWUTS, func() {
		e1, e2, _ := try()
		if e1 == nil && e2 == nil {
			report(probe.Reachable, "sethostname and setdomainname succeed outside a sandbox (in a throwaway UTS namespace)")
		}
		report(probe.Unreachable, fmt.Sprintf("sethostname: %v; setdomainname: %v", e1, e2))
	})
}

func report(result, detail string) { probe.Report(name, result, detail) }

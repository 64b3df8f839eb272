//go:build linux

// Probe raw_socket tries to open raw IPv4/IPv6 sockets (packet forging).
// CAP_NET_RAW is part of the default container set that permissive keeps;
// the sandbox's network namespace has only loopback either way.
package main

import (
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "raw_socket"

func main() { probe.Run(name, attack, control) }

func try() (string, []string) {
	var errs []string
	for _, s := range []struct {
		d, p int
		n    string
	}{{unix.AF_INET, unix.IPPROTO_ICMP, "inet/icmp"}, {unix.AF_INET, unix.IPPROTO_RAW, "inet/raw"}, {unix.AF_INET6, unix.IPPROTO_ICMPV6, "inet6/icmp"}} {
		fd, err := unix.Socket(s.d, unix.SOCK_RAW, s.p)
		if err == nil {
			unix.Close(fd)
			return "raw socket " + s.n + " opened", nil
		}
		errs = append(errs, s.n+": "+err.Error())
	}
	return "", errs
}

func attack() {
	got, errs := try()
	if got != "" {
		report("allowed", got)
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: the same sockets outside a sandbox (opened and closed at
// once): root in the host's network namespace, an unprivileged user in a
// user and network namespace of its own (as a rootless sandbox's root
// has).
func control() {
	check := func() {
		got, errs := try()
		if got != "" {
			report(probe.Reachable, got+" outside a sandbox")
		}
		report(probe.Unreachable, strings.Join(errs, "; "))
	}
	if probe.Privileged() {
		check()
	}
	probe.Isolated(name, unix.CLONE_NEWNET, check)
}

func report(result, detail string) { probe.Report(name, result, detail) }

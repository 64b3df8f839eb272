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

func main() {
	var errs []string
	for _, s := range []struct {
		d, p int
		n    string
	}{{unix.AF_INET, unix.IPPROTO_ICMP, "inet/icmp"}, {unix.AF_INET, unix.IPPROTO_RAW, "inet/raw"}, {unix.AF_INET6, unix.IPPROTO_ICMPV6, "inet6/icmp"}} {
		fd, err := unix.Socket(s.d, unix.SOCK_RAW, s.p)
		if err == nil {
			unix.Close(fd)
			report("allowed", "raw socket "+s.n+" opened")
		}
		errs = append(errs, s.n+": "+err.Error())
	}
	report("blocked", strings.Join(errs, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }

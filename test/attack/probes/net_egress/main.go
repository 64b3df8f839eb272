//go:build linux

// Probe net_egress tries to connect to a TCP listener of the test on a
// non-loopback host address (IPv4 and IPv6), and lists the interfaces it
// has. A connection only counts when the host listener's token comes back.
package main

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "net_egress"

func main() { probe.Run(name, attack, control) }

func attack() {
	port, token := os.Getenv("ATTACK_HOST_PORT"), os.Getenv("ATTACK_NET_TOKEN")
	if port == "" || token == "" {
		report("error", "ATTACK_HOST_PORT/ATTACK_NET_TOKEN not set")
	}
	var errs []string
	for _, h := range strings.Fields(os.Getenv("ATTACK_HOST_IPS")) {
		addr := net.JoinHostPort(h, port)
		reached, detail := probe.HostToken(addr, token)
		if reached {
			report("allowed", "reached the host listener at "+addr)
		}
		errs = append(errs, detail)
	}
	ifs, _ := net.Interfaces()
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	report("blocked", fmt.Sprintf("%s; interfaces: %v", strings.Join(errs, "; "), names))
}

// control: the same connections from the host reach the test's listener
// on the host's own addresses.
func control() {
	if strings.TrimSpace(os.Getenv("ATTACK_HOST_IPS")) == "" {
		report(probe.NotApplicable, "this machine has no non-loopback address")
	}
	probe.AttackReaches(name, nil, nil)
}

func report(result, detail string) { probe.Report(name, result, detail) }

//go:build linux

// Probe net_host_loopback tries to reach a service listening on the host's
// 127.0.0.1 / ::1. The sandbox's loopback is its own, so only the host
// listener's token proves a connection reached the host.
package main

import (
	"net"
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "net_host_loopback"

func main() { probe.Run(name, attack, control) }

func attack() {
	port, token := os.Getenv("ATTACK_HOST_PORT"), os.Getenv("ATTACK_NET_TOKEN")
	if port == "" || token == "" {
		report("error", "ATTACK_HOST_PORT/ATTACK_NET_TOKEN not set")
	}
	var errs []string
	for _, h := range []string{"127.0.0.1", "::1", "localhost"} {
		addr := net.JoinHostPort(h, port)
		reached, detail := probe.HostToken(addr, token)
		if reached {
			report("allowed", "reached the host's loopback service at "+addr)
		}
		errs = append(errs, detail)
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: the same connections from the host reach the test's listener
// on the host's loopback.
func control() { probe.AttackReaches(name, nil, nil) }

func report(result, detail string) { probe.Report(name, result, detail) }

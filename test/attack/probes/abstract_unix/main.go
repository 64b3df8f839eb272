//go:build linux

// Probe abstract_unix tries to connect to an abstract unix socket the host
// listens on (X11, D-Bus and containerd have used these; they are scoped
// by network namespace, not by the filesystem).
package main

import (
	"net"
	"os"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "abstract_unix"

func main() { probe.Run(name, attack, control) }

func attack() {
	sock, token := os.Getenv("ATTACK_ABSTRACT"), os.Getenv("ATTACK_NET_TOKEN")
	if sock == "" || token == "" {
		report("error", "ATTACK_ABSTRACT/ATTACK_NET_TOKEN not set")
	}
	c, err := net.DialTimeout("unix", "@"+sock, 2*time.Second)
	if err != nil {
		report("blocked", err.Error())
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 128)
	n, _ := c.Read(buf)
	c.Close()
	if strings.Contains(string(buf[:n]), token) {
		report("allowed", "reached the host's abstract socket @"+sock)
	}
	report("blocked", "connected, but not to the host listener")
}

// control: the same connection from the host's network namespace reaches
// the test's listener and reads its token.
func control() { probe.AttackReaches(name, nil, nil) }

func report(result, detail string) { probe.Report(name, result, detail) }

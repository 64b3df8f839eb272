//go:build linux

// Probe udp_egress sends UDP datagrams to a host echo listener (non-
// loopback address and host loopback); only an answer carrying the host's
// token counts.
package main

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "udp_egress"

func main() { probe.Run(name, attack, control) }

func attack() {
	port, token := os.Getenv("ATTACK_HOST_UDP_PORT"), os.Getenv("ATTACK_NET_TOKEN")
	if port == "" || token == "" {
		report("error", "ATTACK_HOST_UDP_PORT/ATTACK_NET_TOKEN not set")
	}
	var targets []string
	for _, h := range append(strings.Fields(os.Getenv("ATTACK_HOST_IPS")), "127.0.0.1") {
		targets = append(targets, net.JoinHostPort(h, port))
	}
	var errs []string
	for _, t := range targets {
		c, err := net.Dial("udp", t)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		_, err = c.Write([]byte("ping"))
		if err != nil {
			c.Close()
			errs = append(errs, err.Error())
			continue
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 128)
		n, err := c.Read(buf)
		c.Close()
		if strings.Contains(string(buf[:n]), token) {
			report("allowed", "host UDP listener answered at "+t)
		}
		errs = append(errs, fmt.Sprintf("%s: no answer (%v)", t, err))
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: the same datagrams from the host get the test's listener's
// answer.
func control() { probe.AttackReaches(name, nil, nil) }

func report(result, detail string) { probe.Report(name, result, detail) }

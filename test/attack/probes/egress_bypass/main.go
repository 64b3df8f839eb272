//go:build linux

// Probe egress_bypass tries to reach the host's services through the
// addresses a user-space network stack might mishandle: the gateway and
// resolver of the sandbox's egress device (10.0.2.2, 10.0.2.3, fd00::2,
// fd00::3), the unspecified address, IPv4-mapped IPv6 forms of loopback
// and of the host's own addresses, other loopback addresses, the
// broadcast addresses, and metadata in its mapped form. Only the host
// listener's token proves a connection or datagram got through.
package main

import (
	"context"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "egress_bypass"

func main() { probe.Run(name, attack, control) }

// hosts are the addresses tried for the host's TCP and UDP listeners.
func hosts() []string {
	hs := []string{
		"10.0.2.2", "10.0.2.3", "fd00::2", "fd00::3", "::ffff:10.0.2.2",
		"0.0.0.0", "::", "::ffff:0.0.0.0",
		"::ffff:127.0.0.1", "127.0.0.2", "127.1.2.3",
		"::ffff:169.254.169.254",
	}
	for _, h := range strings.Fields(os.Getenv("ATTACK_HOST_IPS")) {
		if ip := net.ParseIP(h); ip != nil && ip.To4() != nil {
			hs = append(hs, "::ffff:"+h)
		}
	}
	return hs
}

func attack() {
	port, uport, token := os.Getenv("ATTACK_HOST_PORT"), os.Getenv("ATTACK_HOST_UDP_PORT"), os.Getenv("ATTACK_NET_TOKEN")
	if port == "" || uport == "" || token == "" {
		report("error", "ATTACK_HOST_PORT/ATTACK_HOST_UDP_PORT/ATTACK_NET_TOKEN not set")
	}
	var errs []string
	for _, h := range hosts() {
		addr := net.JoinHostPort(h, port)
		reached, detail := probe.HostToken(addr, token)
		if reached {
			report("allowed", "reached the host's TCP listener at "+addr)
		}
		errs = append(errs, detail)
	}
	udp := append(hosts(), "255.255.255.255", "10.0.2.255")
	for _, h := range udp {
		addr := net.JoinHostPort(h, uport)
		if got, err := sendUDP(addr, token); got {
			report("allowed", "the host's UDP listener answered at "+addr)
		} else if err != nil {
			errs = append(errs, addr+": "+err.Error())
		}
	}
	report("blocked", strings.Join(errs, "; "))
}

// sendUDP sends one datagram to addr (broadcast allowed) and reports
// whether an answer carrying token came back within a second.
func sendUDP(addr, token string) (bool, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return false, err
	}
	network := "udp4"
	if ua.IP.To4() == nil {
		network = "udp6"
	}
	if strings.HasPrefix(ua.IP.String(), "::ffff:") {
		network = "udp6"
	}
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		_ = rc.Control(func(fd uintptr) {
			if network == "udp4" {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1)
			}
		})
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), network, "")
	if err != nil {
		return false, err
	}
	defer pc.Close()
	if _, err := pc.WriteTo([]byte("ping"), ua); err != nil {
		return false, err
	}
	pc.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 128)
	for {
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			return false, err
		}
		if strings.Contains(string(buf[:n]), token) {
			return true, nil
		}
	}
}

// control: the same dials from the host reach the test's listeners
// (through the unspecified address, mapped loopback and the host's own
// addresses in their mapped form).
func control() { probe.AttackReaches(name, nil, nil) }

func report(result, detail string) { probe.Report(name, result, detail) }

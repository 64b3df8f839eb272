package config

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// PortMapping publishes a sandbox port on the host.
type PortMapping struct {
	// HostIP is the host address to listen on; empty means 127.0.0.1.
	HostIP      string `json:"host_ip,omitempty"`
	HostPort    uint16 `json:"host_port"`
	SandboxPort uint16 `json:"sandbox_port"`
	// Proto is "tcp" or empty (TCP). UDP ports cannot be published:
	// ParsePortMapping refuses "/udp" with a message that says so.
	Proto string `json:"proto,omitempty"`
}

// ParsePortMapping parses a published port as given to --publish and
// [network].ports: "HOST:SANDBOX", "IP:HOST:SANDBOX" or "SANDBOX" (the
// same port on the host), each optionally followed by "/tcp". "/udp" is
// refused, named: only TCP ports are published.
// An IPv6 host address is written in brackets: "[::1]:8080:80".
func ParsePortMapping(s string) (PortMapping, error) {
	var m PortMapping
	bad := func(why string) (PortMapping, error) {
		return PortMapping{}, fmt.Errorf("invalid port mapping %q: %s (want HOST_PORT:SANDBOX_PORT[/tcp], optionally IP:HOST_PORT:SANDBOX_PORT)", s, why)
	}
	spec := s
	if i := strings.LastIndexByte(spec, '/'); i >= 0 {
		m.Proto = strings.ToLower(spec[i+1:])
		spec = spec[:i]
		switch m.Proto {
		case "tcp":
		case "udp":
			return bad("only TCP ports can be published; UDP is not supported")
		default:
			return bad("the protocol must be tcp")
		}
	}
	if strings.HasPrefix(spec, "[") {
		end := strings.Index(spec, "]:")
		if end < 0 {
			return bad("an IPv6 address must be followed by ]:")
		}
		m.HostIP = spec[1:end]
		spec = spec[end+2:]
		if strings.Count(spec, ":") != 1 {
			return bad("after the address, give HOST_PORT:SANDBOX_PORT")
		}
	}
	parts := strings.Split(spec, ":")
	switch len(parts) {
	case 1:
		parts = []string{parts[0], parts[0]}
	case 2:
	case 3:
		if m.HostIP != "" {
			return bad("too many colons")
		}
		m.HostIP, parts = parts[0], parts[1:]
	default:
		return bad("too many colons")
	}
	if m.HostIP != "" {
		ip, err := netip.ParseAddr(m.HostIP)
		if err != nil || ip.Zone() != "" {
			return bad("the host address is not an IP address")
		}
		m.HostIP = ip.String()
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return bad(fmt.Sprintf("%q is not a port number from 1 to 65535", p))
		}
		if i == 0 {
			m.HostPort = uint16(n)
		} else {
			m.SandboxPort = uint16(n)
		}
	}
	return m, nil
}

// String renders the mapping in the form ParsePortMapping reads.
func (m PortMapping) String() string {
	host := strconv.Itoa(int(m.HostPort))
	if m.HostIP != "" {
		if strings.Contains(m.HostIP, ":") {
			host = "[" + m.HostIP + "]:" + host
		} else {
			host = m.HostIP + ":" + host
		}
	}
	proto := m.Proto
	if proto == "" {
		proto = "tcp"
	}
	return fmt.Sprintf("%s:%d/%s", host, m.SandboxPort, proto)
}

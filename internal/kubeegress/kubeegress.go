// Package kubeegress describes a Kubernetes sandbox's egress proxy: how a
// pod whose network is a domain allow- or block-list is built, and what
// its proxy is told. It is light (no client-go, no network stack), so
// that both the kubernetes backend, which builds the pod, and
// agentkernel-full, which runs in it (package kubeegress/proxy), share
// one description.
//
// A NetworkPolicy matches addresses, never names, so a domain list
// cannot be a NetworkPolicy. Such a sandbox's pod gets two more
// containers from EgressImage (an image holding agentkernel-full):
//
//   - "egress-init", an init container and the only one with
//     CAP_NET_ADMIN, writes nftables rules into the pod's network
//     namespace (Rules) and ends: every TCP connection that does not
//     stay in the pod is redirected to the proxy's port, every DNS
//     message (UDP and TCP port 53) to the proxy's resolver, and
//     everything else that would leave the pod is refused, except what
//     the proxy's own user (UID) sends.
//   - "egress", a sidecar (an init container that keeps running,
//     Kubernetes 1.29 and later) that runs as UID without any
//     capability: agentkernel's policy engine (package netpolicy, the
//     one behind every other backend's egress) answers the DNS messages,
//     decides each redirected connection by its original destination,
//     the name it was resolved from and the TLS SNI or HTTP Host it
//     presents, and connects the allowed ones upstream.
//
// The sandbox's container never has CAP_NET_ADMIN, so it cannot change
// the rules; it never runs as UID, and loses CAP_SETUID and CAP_SETGID,
// so it cannot become the proxy's user either, and CAP_NET_RAW, so it
// cannot forge packets that connection tracking would take for the
// proxy's.
package kubeegress

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

const (
	// Command is agentkernel-full's first argument that runs the
	// proxy's parts: "kube-egress init|serve|ready".
	Command = "kube-egress"
	// EnvSettings holds the proxy's Settings (JSON) in the sidecar.
	EnvSettings = "AGENTKERNEL_EGRESS"
	// UID is the user (and group) of the proxy: the one user whose
	// connections leave the pod as they are. A sandbox container never
	// runs as it.
	UID = 65531
	// TCPPort is where redirected connections reach the proxy, DNSPort
	// where redirected DNS messages do (both on the loopback addresses).
	TCPPort = 15001
	DNSPort = 15053
	// DefaultBinary is agentkernel-full's path in the egress image.
	DefaultBinary = "/usr/local/bin/agentkernel-full"
)

// Rules are what the init container writes into the pod's namespace.
type Rules struct {
	UID     uint32
	TCPPort uint16
	DNSPort uint16
}

// DefaultRules are the rules every egress pod gets.
func DefaultRules() Rules { return Rules{UID: UID, TCPPort: TCPPort, DNSPort: DNSPort} }

// Args are the init container's arguments after Command.
func (r Rules) Args() []string {
	return []string{"init", "--uid", strconv.FormatUint(uint64(r.UID), 10),
		"--tcp-port", strconv.Itoa(int(r.TCPPort)), "--dns-port", strconv.Itoa(int(r.DNSPort))}
}

// Settings are the proxy's: the sandbox's network policy and where it
// asks names.
type Settings struct {
	// Network is the sandbox's resolved policy (filtered with
	// AllowDomains, or full with BlockDomains; AllowCIDRs as given).
	Network sandbox.Network `json:"network"`
	// Resolvers are the upstream DNS servers, "ADDR:PORT"; none: the
	// nameservers of the pod's /etc/resolv.conf (the cluster's DNS).
	Resolvers []string `json:"resolvers,omitempty"`
	TCPPort   uint16   `json:"tcp_port"`
	DNSPort   uint16   `json:"dns_port"`
}

// Check refuses settings the proxy cannot serve.
func (s *Settings) Check() error {
	switch s.Network.Mode {
	case sandbox.NetworkFiltered, sandbox.NetworkFull:
	default:
		return fmt.Errorf("egress proxy: network mode %q is not served by a proxy (filtered or full)", s.Network.Mode)
	}
	if len(s.Network.Ports) > 0 || len(s.Network.AllowUDP) > 0 {
		return fmt.Errorf("egress proxy: published ports and UDP allow-list entries are not served")
	}
	if s.TCPPort == 0 || s.DNSPort == 0 || s.TCPPort == s.DNSPort {
		return fmt.Errorf("egress proxy: ports %d and %d: need two different non-zero ports", s.TCPPort, s.DNSPort)
	}
	for _, r := range s.Resolvers {
		if _, err := ParseResolver(r); err != nil {
			return err
		}
	}
	return nil
}

// ParseResolver reads a resolver address: ADDR:PORT, or ADDR for port 53.
func ParseResolver(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil && ap.Port() != 0 && ap.Addr().Zone() == "" {
		return ap, nil
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return netip.AddrPortFrom(a, 53), nil
	}
	return netip.AddrPort{}, fmt.Errorf("egress resolver %q: give ADDR or ADDR:PORT (192.0.2.53, [2001:db8::53]:53)", s)
}

package netpolicy

import (
	"net/netip"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Reasons an address is refused whatever the name that led to it.
const (
	reasonMetadata    = "cloud metadata endpoint"
	reasonLoopback    = "loopback address"
	reasonLinkLocal   = "link-local address"
	reasonUnspecified = "unspecified address"
	reasonMulticast   = "multicast or broadcast address"
	reasonReserved    = "reserved address"
	reasonHost        = "one of the host's own addresses"
	reasonPrivate     = "private address (refused in filtered mode)"
	reasonBlocked     = "address in the block list"
	reasonSandboxNet  = "address of the sandbox's own network"
)

var (
	metadataAddrs = sandbox.MetadataAddrs()
	// metadataNames are refused in every mode, as BlockDomains entries.
	metadataNames = sandbox.MetadataNames()
	nat64Prefix   = netip.MustParsePrefix("64:ff9b::/96")
	v4Compat      = netip.MustParsePrefix("::/96")

	refusedPrefixes = []struct {
		p      netip.Prefix
		reason string
	}{
		{netip.MustParsePrefix("0.0.0.0/8"), reasonUnspecified},
		{netip.MustParsePrefix("127.0.0.0/8"), reasonLoopback},
		{netip.MustParsePrefix("169.254.0.0/16"), reasonLinkLocal},
		{netip.MustParsePrefix("224.0.0.0/4"), reasonMulticast},
		{netip.MustParsePrefix("240.0.0.0/4"), reasonReserved}, // and 255.255.255.255
		{netip.MustParsePrefix("::/128"), reasonUnspecified},
		{netip.MustParsePrefix("::1/128"), reasonLoopback},
		{netip.MustParsePrefix("fe80::/10"), reasonLinkLocal},
		{netip.MustParsePrefix("fec0::/10"), reasonLinkLocal}, // deprecated site-local
		{netip.MustParsePrefix("ff00::/8"), reasonMulticast},
	}
	privatePrefixes = []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("100.64.0.0/10"),
		netip.MustParsePrefix("fc00::/7"),
	}
)

// canonical returns a in the form the rules are written in: no zone, an
// IPv4-mapped IPv6 address as its IPv4 address.
func canonical(a netip.Addr) netip.Addr {
	return a.WithZone("").Unmap()
}

// explicit reports whether AllowCIDRs names a.
func (e *Engine) explicit(a netip.Addr) bool {
	a = canonical(a)
	for _, p := range e.allowCIDRs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// refused returns why a may not be reached in this engine's mode, or ""
// when its class allows it. It does not look at names: a "" address still
// needs a name in filtered mode.
func (e *Engine) refused(a netip.Addr) string {
	a = canonical(a)
	if !a.IsValid() {
		return reasonUnspecified
	}
	if e.explicit(a) {
		return ""
	}
	if r := addrClass(a); r != "" {
		return r
	}
	if _, ok := e.blockAddrs[a]; ok {
		return reasonBlocked
	}
	// An address with an IPv4 address inside that a NAT64 gateway would
	// reach is judged by that address.
	if a.Is6() && nat64Prefix.Contains(a) {
		b := a.As16()
		v4 := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		if e.explicit(v4) {
			return ""
		}
		if r := e.refused(v4); r != "" {
			return r
		}
	}
	if _, ok := e.hostAddrs[a]; ok {
		return reasonHost
	}
	for _, p := range e.sandboxNet {
		if p.Contains(a) {
			return reasonSandboxNet
		}
	}
	if e.filtered {
		for _, p := range privatePrefixes {
			if p.Contains(a) {
				return reasonPrivate
			}
		}
	}
	return ""
}

// addrClass returns why a is refused in every mode, "" if it is not.
func addrClass(a netip.Addr) string {
	for _, m := range metadataAddrs {
		if a == m {
			return reasonMetadata
		}
	}
	for _, r := range refusedPrefixes {
		if r.p.Contains(a) {
			return r.reason
		}
	}
	if a.Is6() && v4Compat.Contains(a) {
		// IPv4-compatible addresses (deprecated) are never routed.
		return reasonReserved
	}
	return ""
}

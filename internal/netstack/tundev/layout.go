// Package tundev creates and configures the TUN device that carries a
// sandbox's traffic to the user-space network stack (internal/netstack).
//
// Open creates the device in the calling thread's network namespace and
// Configure gives it its MTU, addresses and default routes, both with
// plain system calls and a few hand-written rtnetlink messages. The
// package deliberately does not use github.com/vishvananda/netlink (or
// gVisor): it is linked into the lean `agentkernel` binary, whose every
// start pays for the initialisation of every package it links, and the
// four netlink requests needed here are a few dozen lines.
package tundev

import "net/netip"

// DefaultMTU is the MTU of a sandbox's TUN device. A TUN device carries
// whole IP packets through one read or write each, so the largest MTU
// the kernel accepts keeps the number of packets, and so of system calls
// and stack passes, per byte lowest.
const DefaultMTU = 65520

// VnetHdrLen is the length of the virtio-net header (struct
// virtio_net_hdr) before every packet read from or written to a device
// that Open made: flags (1 byte), gso_type (1), hdr_len, gso_size,
// csum_start and csum_offset (2 each, in the machine's byte order).
// Packets from the sandbox may carry VnetNeedsCsum: their transport
// checksum is partial, which the stack, trusting the sandbox's kernel
// for checksums, never checks. Packets to the sandbox carry it for TCP
// and UDP, with csum_start at the transport header and csum_offset at
// its checksum field, so that neither the stack nor the sandbox's
// kernel computes a checksum over the data. gso_type is always
// VNET_HDR_GSO_NONE: no segmentation offload is turned on.
const VnetHdrLen = 10

// VnetNeedsCsum is VIRTIO_NET_HDR_F_NEEDS_CSUM, the header's flag for a
// packet whose transport checksum holds only the pseudo-header's sum.
const VnetNeedsCsum = 1

// tunFCsum is TUN_F_CSUM (linux/if_tun.h): the device takes packets
// with partial checksums.
const tunFCsum = 0x01

// Layout is the addressing of a sandbox's network: the sandbox's own
// addresses, the gateway (the user-space stack) and the resolver address
// the stack answers DNS on, for IPv4 and IPv6.
type Layout struct {
	MTU int
	// Addr4 and Addr6 are the sandbox's addresses with their prefixes.
	Addr4, Addr6 netip.Prefix
	// Gateway4 and Gateway6 are the next hops of the default routes.
	Gateway4, Gateway6 netip.Addr
	// DNS4 and DNS6 are the resolver addresses (resolv.conf).
	DNS4, DNS6 netip.Addr
}

// DefaultLayout is the layout every sandbox gets: 10.0.2.100/24 behind
// 10.0.2.2 with the resolver on 10.0.2.3, and fd00::100/64 behind fd00::2
// with the resolver on fd00::3 (the addresses slirp4netns and pasta users
// know).
func DefaultLayout() Layout {
	return Layout{
		MTU:      DefaultMTU,
		Addr4:    netip.MustParsePrefix("10.0.2.100/24"),
		Gateway4: netip.MustParseAddr("10.0.2.2"),
		DNS4:     netip.MustParseAddr("10.0.2.3"),
		Addr6:    netip.MustParsePrefix("fd00::100/64"),
		Gateway6: netip.MustParseAddr("fd00::2"),
		DNS6:     netip.MustParseAddr("fd00::3"),
	}
}

// Validate reports whether the layout is usable: every address valid and
// of the right family, the gateways and resolvers inside the sandbox's
// prefixes and distinct from its address. A zero IPv6 part is allowed (no
// IPv6).
func (l Layout) Validate() error {
	if l.MTU < 1280 || l.MTU > 65535 {
		return errorf("MTU %d is out of range (1280 to 65535)", l.MTU)
	}
	if err := checkFamily("IPv4", l.Addr4, l.Gateway4, l.DNS4, true); err != nil {
		return err
	}
	if l.Addr6.IsValid() || l.Gateway6.IsValid() || l.DNS6.IsValid() {
		if err := checkFamily("IPv6", l.Addr6, l.Gateway6, l.DNS6, false); err != nil {
			return err
		}
	}
	return nil
}

// HasIPv6 reports whether the layout has an IPv6 part.
func (l Layout) HasIPv6() bool { return l.Addr6.IsValid() }

func checkFamily(name string, p netip.Prefix, gw, dns netip.Addr, v4 bool) error {
	if !p.IsValid() || !gw.IsValid() || !dns.IsValid() {
		return errorf("the %s layout needs an address, a gateway and a resolver address", name)
	}
	for _, a := range []netip.Addr{p.Addr(), gw, dns} {
		if a.Is4() != v4 || a.Zone() != "" {
			return errorf("%s is not an %s address", a, name)
		}
	}
	if !p.Contains(gw) || !p.Contains(dns) {
		return errorf("the %s gateway %s and resolver %s must be inside %s", name, gw, dns, p)
	}
	if gw == p.Addr() || dns == p.Addr() {
		return errorf("the %s gateway and resolver must differ from the sandbox address %s", name, p.Addr())
	}
	return nil
}

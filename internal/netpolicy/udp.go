package netpolicy

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/agentkernel/agentkernel/internal/netstack"
	"github.com/agentkernel/agentkernel/internal/policy"
)

// ErrRefused is the error of a flow that the policy refuses.
var ErrRefused = errors.New("refused by the sandbox's network policy")

// UDP opens the host's side of a UDP flow that AllowUDP permits.
func (e *Engine) UDP(ctx context.Context, flow netstack.Flow) (net.Conn, error) {
	dst := netip.AddrPortFrom(canonical(flow.Dst.Addr()), flow.Dst.Port())
	if !e.udpAllowed(dst) {
		e.deny(Denial{Kind: KindUDP, Addr: dst, Reason: "UDP is refused unless allow_udp names it", Allow: allowUDPHint(dst)})
		return nil, ErrRefused
	}
	d := net.Dialer{Timeout: e.dialTimeout}
	c, err := d.DialContext(ctx, "udp", dst.String())
	if err != nil {
		e.stats.dialErrors.Add(1)
		return nil, err
	}
	e.allowed(KindUDP)
	return c, nil
}

func (e *Engine) udpAllowed(dst netip.AddrPort) bool {
	if !e.mode.Egress() || dst.Port() == 0 {
		return false
	}
	var names []string
	for _, r := range e.udp {
		if r.port != dst.Port() {
			continue
		}
		if r.prefix.IsValid() {
			if r.prefix.Contains(dst.Addr()) {
				return true
			}
			continue
		}
		if e.refused(dst.Addr()) != "" {
			continue
		}
		if names == nil {
			names = e.names.lookup(dst.Addr(), e.now())
		}
		for _, n := range names {
			if e.blockedBy(n) == "" && policy.DomainMatches(r.pattern, n) {
				return true
			}
		}
	}
	return false
}

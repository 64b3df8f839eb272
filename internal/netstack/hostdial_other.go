//go:build !linux

package netstack

import (
	"context"
	"net"
	"net/netip"
	"time"
)

// DialHost opens a TCP connection to addr from the host's network, with
// keep-alive probes after keepIdle of silence (none when keepIdle is zero
// or less).
func DialHost(ctx context.Context, addr netip.AddrPort, keepIdle time.Duration) (net.Conn, error) {
	d := net.Dialer{KeepAlive: -1}
	if keepIdle > 0 {
		d.KeepAliveConfig = net.KeepAliveConfig{Enable: true, Idle: keepIdle, Interval: -1, Count: -1}
	}
	return d.DialContext(ctx, "tcp", netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port()).String())
}

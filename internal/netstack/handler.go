package netstack

import (
	"context"
	"net"
	"net/netip"
)

// Flow is one TCP connection or UDP flow that a sandbox starts.
type Flow struct {
	Proto string         // "tcp" or "udp"
	Src   netip.AddrPort // the sandbox's end
	Dst   netip.AddrPort // where the sandbox sent it
}

// TCPRequest is a connection attempt from inside the sandbox, held at its
// SYN until the Handler answers. Exactly one of Reject or Accept must be
// called.
type TCPRequest interface {
	Flow() Flow
	// Reject answers the SYN with a RST: the client sees "connection
	// refused" at once.
	Reject()
	// Accept completes the handshake and returns the sandbox's end of the
	// connection.
	Accept() (net.Conn, error)
}

// Handler decides and serves every flow that leaves the sandbox. The
// stack calls it from its own goroutines; it must be safe for concurrent
// use.
type Handler interface {
	// TCP is called on a goroutine of its own for each new connection.
	TCP(req TCPRequest)
	// UDP is called once for each new UDP flow other than DNS to the
	// stack's resolver address. It returns the connection the stack
	// relays the flow's datagrams through, or an error to refuse the
	// flow (the sandbox gets ICMP port unreachable).
	UDP(ctx context.Context, flow Flow) (net.Conn, error)
	// DNS answers one DNS message (wire format) that the sandbox sent to
	// the stack's resolver address over UDP or TCP.
	DNS(ctx context.Context, src netip.AddrPort, query []byte) ([]byte, error)
}

// transportKey is the context key of a DNS message's transport.
type transportKey struct{}

// WithDNSOverTCP marks ctx as that of a DNS message that came over TCP
// (the stack does it before Handler.DNS): its answer may be as large as
// a DNS message can be, where a UDP answer is truncated to what the
// client said it takes.
func WithDNSOverTCP(ctx context.Context) context.Context {
	return context.WithValue(ctx, transportKey{}, true)
}

// DNSOverTCP reports whether a Handler.DNS call's message came over TCP.
func DNSOverTCP(ctx context.Context) bool {
	v, _ := ctx.Value(transportKey{}).(bool)
	return v
}

package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"

	"github.com/agentkernel/agentkernel/internal/netstack"
)

// bufPool holds the copy buffers of connections (netstack.Copy), the
// first of which also holds the client's first bytes while they are
// inspected.
var bufPool = sync.Pool{New: func() any { b := make([]byte, netstack.CopyBufSize); return &b }}

// TCP decides a connection from the sandbox and, if allowed, serves it
// until both sides are done.
func (e *Engine) TCP(req netstack.TCPRequest) {
	f := req.Flow()
	dst := netip.AddrPortFrom(canonical(f.Dst.Addr()), f.Dst.Port())
	names, explicit, d := e.decideTCP(dst)
	if d != nil {
		e.deny(*d) // reported before the sandbox sees the RST
		req.Reject()
		return
	}
	ok, full := e.reserve()
	if !ok {
		if full {
			e.deny(Denial{Kind: KindTCP, Addr: dst, Reason: fmt.Sprintf("more than %d connections at once", e.maxConns)})
		}
		req.Reject()
		return
	}
	name := ""
	if len(names) > 0 {
		name = names[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.dialTimeout)
	up, err := e.dialer.DialTCP(ctx, name, dst)
	cancel()
	if err != nil {
		e.unreserve()
		e.stats.dialErrors.Add(1)
		req.Reject()
		return
	}
	c, err := req.Accept()
	if err != nil {
		e.unreserve()
		up.Close()
		return
	}
	tracked := e.track(c, up)
	e.unreserve()
	if !tracked {
		c.Close()
		up.Close()
		return
	}
	defer e.untrack(c, up)
	e.allowed(KindTCP)
	e.splice(c, up, dst, func(kind string, names []string) *Denial {
		return e.checkNames(kind, names, dst, explicit)
	})
}

// decideTCP checks a destination by its address: the names known for it
// (allowed ones only), whether AllowCIDRs (or an IP literal in
// AllowDomains) names it, or why it is refused.
func (e *Engine) decideTCP(dst netip.AddrPort) (names []string, explicit bool, d *Denial) {
	a := dst.Addr()
	if !e.mode.Egress() {
		return nil, false, &Denial{Kind: KindTCP, Addr: dst, Reason: "network access is off"}
	}
	if why := e.refused(a); why != "" {
		return nil, false, &Denial{Kind: KindTCP, Addr: dst, Reason: why, Allow: refusalHint(a, why)}
	}
	_, lit := e.allowAddrs[a]
	explicit = lit || e.explicit(a)
	for _, n := range e.names.lookup(a, e.now()) {
		if e.allowedName(n) {
			names = append(names, n)
		}
	}
	if e.filtered && !explicit && len(names) == 0 {
		return nil, false, &Denial{Kind: KindTCP, Addr: dst, Reason: "no allowed name resolved to this address", Allow: allowCIDRHint(a)}
	}
	return names, explicit, nil
}

// checkNames judges the names a connection presented (SNI or Host).
func (e *Engine) checkNames(kind string, names []string, dst netip.AddrPort, explicit bool) *Denial {
	for _, n := range names {
		if a, err := netip.ParseAddr(n); err == nil {
			if canonical(a) == dst.Addr() || !e.filtered || explicit {
				continue
			}
			return &Denial{Kind: kind, Name: n, Addr: dst, Reason: "names another address than the one connected to"}
		}
		if b := e.blockedBy(n); b != "" {
			return &Denial{Kind: kind, Name: n, Addr: dst, Reason: fmt.Sprintf("matches the block list (%s)", b)}
		}
		if !e.filtered || explicit {
			continue
		}
		if !e.allowedName(n) {
			return &Denial{Kind: kind, Name: n, Addr: dst, Reason: "not in the allow list", Allow: allowDomainHint(n)}
		}
		if !e.names.has(dst.Addr(), n, e.now()) {
			return &Denial{Kind: kind, Name: n, Addr: dst, Reason: "did not resolve to this address through the sandbox's resolver"}
		}
	}
	return nil
}

// nameCheck judges the names a connection's first bytes presented (SNI
// or Host): nil allows them.
type nameCheck func(kind string, names []string) *Denial

// splice inspects the client's first bytes with check, then copies both
// ways until both sides have finished.
func (e *Engine) splice(c, up net.Conn, dst netip.AddrPort, check nameCheck) {
	if e.inject != nil && e.inject.ports[dst.Port()] {
		e.spliceInject(c, up, dst, check)
		return
	}
	done := make(chan struct{})
	go func() {
		netstack.GrowStack()
		defer close(done)
		bp := bufPool.Get().(*[]byte)
		defer bufPool.Put(bp)
		if err := copyConn(c, up, *bp); err != nil {
			abort(c, up)
		}
	}()

	bp := bufPool.Get().(*[]byte)
	n, ok := e.inspect(c, *bp, dst, check)
	relayClient(c, up, bp, n, ok, done)
}

// relayClient ends a splice: when the inspection allowed it (ok), the
// client's first n bytes in *bp go up, then the rest of its stream;
// otherwise, or when that fails, both sides are aborted. It then waits for
// the other direction (done) and closes both.
func relayClient(c, up net.Conn, bp *[]byte, n int, ok bool, done <-chan struct{}) {
	buf := *bp
	var err error
	if ok && n > 0 {
		_, err = up.Write(buf[:n])
	}
	if ok && err == nil {
		err = copyConn(up, c, buf)
	}
	if !ok || err != nil {
		abort(c, up)
	}
	bufPool.Put(bp)
	<-done
	c.Close()
	up.Close()
}

// inspect reads the client's first bytes into buf until they show a name
// (or no name can be found in them) and checks it. It returns how many
// bytes of buf are to be sent on, and false when the connection is to
// be refused.
func (e *Engine) inspect(c net.Conn, buf []byte, dst netip.AddrPort, check nameCheck) (int, bool) {
	n, ok, _, _ := e.inspectNames(c, buf, dst, check)
	return n, ok
}

// inspectNames is inspect that also returns the kind and names the
// connection presented (none for an opaque one).
func (e *Engine) inspectNames(c net.Conn, buf []byte, dst netip.AddrPort, check nameCheck) (n int, ok bool, kind string, names []string) {
	limit := min(len(buf), inspectLimit)
	for {
		m, err := c.Read(buf[n:limit])
		n += m
		if n > 0 {
			v, kind, names := sniff(buf[:n])
			switch v {
			case opaque:
				return n, true, "", nil
			case named:
				if d := check(kind, names); d != nil {
					e.deny(*d)
					return 0, false, kind, names
				}
				if e.inject != nil && kind == KindHost && e.inject.headCarries(buf[:n]) {
					// A placeholder in plain HTTP: no secret is ever
					// injected there, and this one is leaking.
					name := ""
					if len(names) > 0 {
						name = names[len(names)-1]
					}
					e.deny(placeholderDenial(name, dst))
					return 0, false, kind, names
				}
				e.allowed(kind)
				return n, true, kind, names
			case malformed:
				e.deny(Denial{Kind: kindOf(buf[:n]), Addr: dst, Reason: "unreadable TLS ClientHello or HTTP request"})
				return 0, false, "", nil
			}
			if n == limit {
				e.deny(Denial{Kind: kindOf(buf[:n]), Addr: dst, Reason: "TLS ClientHello or HTTP request head too long"})
				return 0, false, "", nil
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) && n == 0 {
				// The client closed its side without a word: the copy
				// that follows passes the end of stream on.
				return 0, true, "", nil
			}
			// Cut off in the middle of what could name a host: nothing
			// of it goes on.
			return 0, false, "", nil
		}
	}
}

func kindOf(b []byte) string {
	if len(b) > 0 && b[0] == 0x16 {
		return KindSNI
	}
	return KindHost
}

// copyConn copies from src to dst until src ends, then half-closes dst;
// an error means the pair is to be aborted.
func copyConn(dst, src net.Conn, buf []byte) error {
	_, err := netstack.Copy(dst, src, buf)
	return err
}

// abort ends both sides at once; the sandbox's side with a RST where the
// connection can.
func abort(c, up net.Conn) {
	for _, x := range []net.Conn{c, up} {
		if l, ok := x.(interface{ SetLinger(int) error }); ok {
			l.SetLinger(0)
		}
		x.Close()
	}
}

// halfClose ends c's write side (an end of stream for its peer) where it
// can.
func halfClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

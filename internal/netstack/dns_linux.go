package netstack

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
)

const (
	dnsPort = 53
	// dnsTimeout bounds one Handler.DNS call.
	dnsTimeout = 15 * time.Second
	// dnsTCPIdle ends a DNS-over-TCP connection without a query.
	dnsTCPIdle = 30 * time.Second
	// dnsInFlight caps the UDP queries answered at once; a query beyond
	// it is dropped (the client retries).
	dnsInFlight = 128
	// dnsTCPConns caps the DNS-over-TCP connections open at once; a
	// connection beyond it is closed at once.
	dnsTCPConns = 64
)

// startDNS listens on port 53 of the resolver addresses, UDP and TCP.
func (st *Stack) startDNS() error {
	addrs := []netip.Addr{st.layout.DNS4}
	if st.layout.HasIPv6() {
		addrs = append(addrs, st.layout.DNS6)
	}
	sem := make(chan struct{}, dnsInFlight)
	conns := make(chan struct{}, dnsTCPConns)
	for _, a := range addrs {
		fa := tcpip.FullAddress{NIC: nicID, Addr: tcpAddr(a), Port: dnsPort}
		uc, err := gonet.DialUDP(st.s, &fa, nil, protoOf(a))
		if err != nil {
			return err
		}
		if !st.track(uc) || !st.goTracked(func() { st.serveDNSUDP(uc, sem) }) {
			return ErrClosed
		}
		ln, err := gonet.ListenTCP(st.s, fa, protoOf(a))
		if err != nil {
			return err
		}
		if !st.track(ln) || !st.goTracked(func() { st.serveDNSTCP(ln, conns) }) {
			return ErrClosed
		}
	}
	return nil
}

func (st *Stack) serveDNSUDP(uc *gonet.UDPConn, sem chan struct{}) {
	buf := make([]byte, 65535)
	for {
		n, from, err := uc.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		src := from.(*net.UDPAddr).AddrPort()
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		select {
		case sem <- struct{}{}:
		default:
			continue
		}
		query := append([]byte(nil), buf[:n]...)
		if !st.goTracked(func() {
			defer func() { <-sem }()
			if reply := st.dns(src, query, false); reply != nil {
				uc.WriteTo(reply, from)
			}
		}) {
			<-sem
			return
		}
	}
}

func (st *Stack) serveDNSTCP(ln *gonet.TCPListener, conns chan struct{}) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed
		}
		select {
		case conns <- struct{}{}:
		default:
			c.Close()
			continue
		}
		if !st.track(c) {
			<-conns
			return
		}
		if !st.goTracked(func() {
			defer func() { <-conns }()
			defer st.untrack(c)
			defer c.Close()
			st.serveDNSConn(c)
		}) {
			<-conns
			c.Close()
			return
		}
	}
}

// serveDNSConn answers length-prefixed DNS messages on one TCP
// connection, one at a time, until the client closes it or stays idle.
func (st *Stack) serveDNSConn(c net.Conn) {
	src := c.RemoteAddr().(*net.TCPAddr).AddrPort()
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	var lenBuf [2]byte
	msg := make([]byte, 65535)
	for {
		c.SetReadDeadline(time.Now().Add(dnsTCPIdle))
		if _, err := io.ReadFull(c, lenBuf[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(lenBuf[:]))
		if _, err := io.ReadFull(c, msg[:n]); err != nil {
			return
		}
		reply := st.dns(src, append([]byte(nil), msg[:n]...), true)
		if reply == nil || len(reply) > 65535 {
			return
		}
		out := make([]byte, 2+len(reply))
		binary.BigEndian.PutUint16(out, uint16(len(reply)))
		copy(out[2:], reply)
		c.SetWriteDeadline(time.Now().Add(dnsTCPIdle))
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// dns asks the Handler; nil means no answer (the client times out or
// retries).
func (st *Stack) dns(src netip.AddrPort, query []byte, overTCP bool) []byte {
	st.dnsQueries.Add(1)
	ctx, cancel := context.WithTimeout(st.ctx, dnsTimeout)
	defer cancel()
	if overTCP {
		ctx = WithDNSOverTCP(ctx)
	}
	reply, err := st.cfg.Handler.DNS(ctx, src, query)
	if err != nil || len(reply) == 0 {
		st.dnsFailed.Add(1)
		if err != nil {
			st.log.Debug("netstack: DNS handler", "src", src.String(), "err", err)
		}
		return nil
	}
	return reply
}

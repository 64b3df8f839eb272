package netstack

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/agentkernel/agentkernel/internal/netstack/tundev"
)

// handleUDP runs on the stack's packet-processing goroutine for the
// first datagram of each UDP flow that no endpoint of the stack (the
// resolver) takes: it must not block.
func (st *Stack) handleUDP(r *udp.ForwarderRequest) bool {
	flow := flowOf("udp", r.ID())
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return true // dropped
	}
	if st.udpFlows >= st.cfg.MaxUDPFlows {
		st.mu.Unlock()
		st.udpRefuse.Add(1)
		return false // the stack answers port unreachable
	}
	st.udpFlows++
	st.mu.Unlock()
	done := func() {
		st.mu.Lock()
		st.udpFlows--
		st.mu.Unlock()
	}

	var wq waiter.Queue
	ep, e := r.CreateEndpoint(&wq)
	if e != nil {
		done()
		st.log.Debug("netstack: UDP endpoint", "flow", flow.Src.String()+"->"+flow.Dst.String(), "err", e.String())
		return true
	}
	sb := gonet.NewUDPConn(&wq, ep)
	if !st.goTracked(func() {
		defer done()
		defer sb.Close()
		up, err := st.cfg.Handler.UDP(st.ctx, flow)
		if err != nil {
			st.udpRefuse.Add(1)
			st.portUnreachable(flow)
			return
		}
		st.udpFlowsTotal.Add(1)
		st.relayUDP(sb, up)
	}) {
		done()
		sb.Close()
	}
	return true
}

// relayUDP copies datagrams both ways between the sandbox's flow and the
// Handler's connection until either fails or the flow has been idle for
// the configured timeout.
func (st *Stack) relayUDP(sb *gonet.UDPConn, up net.Conn) {
	if !st.track(up) {
		return
	}
	defer st.untrack(up)
	defer up.Close()
	idle := st.cfg.UDPIdleTimeout
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	// The largest datagram that reaches the sandbox unfragmented over
	// IPv4 and IPv6 alike.
	maxToSandbox := st.layout.MTU - header.IPv6MinimumSize - header.UDPMinimumSize
	copyDatagrams := func(dst, src net.Conn, limit int) {
		buf := make([]byte, 65535)
		for {
			src.SetReadDeadline(time.Now().Add(idle))
			n, err := src.Read(buf)
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) && time.Since(time.Unix(0, last.Load())) < idle {
					continue
				}
				break
			}
			last.Store(time.Now().UnixNano())
			if n > limit {
				// It would leave the stack in fragments, whose checksum
				// the device cannot offload (vnetHeader): dropped, as
				// a datagram too large for a path is.
				st.log.Debug("netstack: UDP datagram too large for the sandbox's link", "flow", sb.RemoteAddr(), "bytes", n)
				continue
			}
			if _, err := dst.Write(buf[:n]); err != nil && !isRefused(err) {
				break
			}
		}
		// End the other direction too.
		sb.Close()
		up.Close()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyDatagrams(sb, up, maxToSandbox)
	}()
	copyDatagrams(up, sb, 65535)
	<-done
}

// isRefused reports a host socket's report of an earlier ICMP error
// (the datagram after it goes out again).
func isRefused(err error) bool { return errors.Is(err, unix.ECONNREFUSED) }

// portUnreachable tells the sandbox that nothing listens at the flow's
// destination: an ICMP (ICMPv6) port unreachable from the destination,
// quoting the headers of a datagram of the flow, written straight to the
// TUN device.
func (st *Stack) portUnreachable(f Flow) {
	var pkt []byte
	if f.Src.Addr().Is4() {
		pkt = icmp4Unreachable(f)
	} else {
		pkt = icmp6Unreachable(f)
	}
	var vnet [tundev.VnetHdrLen]byte // no offload: the ICMP packet is summed
	if err := st.link.write([][]byte{vnet[:], pkt}); err != nil {
		st.log.Debug("netstack: writing port unreachable", "err", err)
	}
}

func udpHeader(f Flow) []byte {
	u := make([]byte, 8)
	binary.BigEndian.PutUint16(u[0:], f.Src.Port())
	binary.BigEndian.PutUint16(u[2:], f.Dst.Port())
	binary.BigEndian.PutUint16(u[4:], 8)
	return u
}

func ipv4Header(src, dst netip.Addr, proto byte, payloadLen int) []byte {
	h := make([]byte, 20)
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+payloadLen))
	h[8] = 64
	h[9] = proto
	s4, d4 := src.As4(), dst.As4()
	copy(h[12:], s4[:])
	copy(h[16:], d4[:])
	binary.BigEndian.PutUint16(h[10:], ^checksum.Checksum(h, 0))
	return h
}

func icmp4Unreachable(f Flow) []byte {
	quoted := append(ipv4Header(f.Src.Addr(), f.Dst.Addr(), unix.IPPROTO_UDP, 8), udpHeader(f)...)
	icmp := make([]byte, 8, 8+len(quoted))
	icmp[0], icmp[1] = 3, 3 // destination unreachable, port unreachable
	icmp = append(icmp, quoted...)
	binary.BigEndian.PutUint16(icmp[2:], ^checksum.Checksum(icmp, 0))
	return append(ipv4Header(f.Dst.Addr(), f.Src.Addr(), unix.IPPROTO_ICMP, len(icmp)), icmp...)
}

func ipv6Header(src, dst netip.Addr, next byte, payloadLen int) []byte {
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(payloadLen))
	h[6] = next
	h[7] = 64
	s6, d6 := src.As16(), dst.As16()
	copy(h[8:], s6[:])
	copy(h[24:], d6[:])
	return h
}

func icmp6Unreachable(f Flow) []byte {
	quoted := append(ipv6Header(f.Src.Addr(), f.Dst.Addr(), unix.IPPROTO_UDP, 8), udpHeader(f)...)
	icmp := make([]byte, 8, 8+len(quoted))
	icmp[0], icmp[1] = 1, 4 // destination unreachable, port unreachable
	icmp = append(icmp, quoted...)
	// The checksum covers the pseudo-header: addresses, length, next header.
	src, dst := f.Dst.Addr().As16(), f.Src.Addr().As16()
	pseudo := make([]byte, 0, 40)
	pseudo = append(pseudo, src[:]...)
	pseudo = append(pseudo, dst[:]...)
	pseudo = binary.BigEndian.AppendUint32(pseudo, uint32(len(icmp)))
	pseudo = append(pseudo, 0, 0, 0, unix.IPPROTO_ICMPV6)
	sum := checksum.Checksum(pseudo, 0)
	binary.BigEndian.PutUint16(icmp[2:], ^checksum.Checksum(icmp, sum))
	return append(ipv6Header(f.Dst.Addr(), f.Src.Addr(), unix.IPPROTO_ICMPV6, len(icmp)), icmp...)
}

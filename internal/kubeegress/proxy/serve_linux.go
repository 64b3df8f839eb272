package proxy

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/kubeegress"
	"github.com/agentkernel/agentkernel/internal/netpolicy"
	"github.com/agentkernel/agentkernel/internal/netstack"
)

const (
	// dnsTimeout bounds one DNS message's answer; dnsTCPIdle a
	// DNS-over-TCP connection without a message.
	dnsTimeout = 15 * time.Second
	dnsTCPIdle = 30 * time.Second
	// dnsInFlight caps the UDP messages answered at once (more are
	// dropped, as a busy resolver does); dnsTCPConns the DNS-over-TCP
	// connections open at once.
	dnsInFlight = 128
	dnsTCPConns = 64
)

// Serve runs the proxy for s until ctx ends: it listens on the loopback
// addresses (TCPPort for redirected connections, DNSPort for DNS over
// UDP and TCP), and reports each refusal on log as one JSON line
// ({"denied": ...}) and, when it stops, the engine's summary. ready, if
// not nil, is called once every listener is open.
func Serve(ctx context.Context, s kubeegress.Settings, log io.Writer, ready func()) error {
	if err := s.Check(); err != nil {
		return err
	}
	var resolvers []netip.AddrPort
	for _, r := range s.Resolvers {
		ap, err := kubeegress.ParseResolver(r)
		if err != nil {
			return err
		}
		resolvers = append(resolvers, ap)
	}
	var logMu sync.Mutex
	logLine := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			return
		}
		logMu.Lock()
		defer logMu.Unlock()
		_, _ = log.Write(append(b, '\n'))
	}
	eng, err := netpolicy.Compile(s.Network, netpolicy.Options{
		Resolvers: resolvers,
		// The pod has no network of the sandbox's own to keep apart.
		SandboxNet: []netip.Prefix{},
		OnDeny:     func(d netpolicy.Denial) { logLine(map[string]any{"denied": d.String()}) },
	})
	if err != nil {
		return fmt.Errorf("egress proxy: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var closers []io.Closer
	var wg sync.WaitGroup
	defer func() {
		for _, c := range closers {
			c.Close()
		}
		wg.Wait()
		eng.Close()
		if sum := eng.Summary(); sum != "" {
			logLine(map[string]any{"summary": sum})
		}
	}()
	opened := 0
	for _, host := range []string{"127.0.0.1", "::1"} {
		tl, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(s.TCPPort)))
		if err != nil {
			if host == "::1" && noIPv6(err) {
				continue // no IPv6 in the pod: nothing to redirect
			}
			return fmt.Errorf("egress proxy: %w", err)
		}
		closers = append(closers, tl)
		ul, err := net.ListenPacket("udp", net.JoinHostPort(host, fmt.Sprint(s.DNSPort)))
		if err != nil {
			return fmt.Errorf("egress proxy: %w", err)
		}
		closers = append(closers, ul)
		dl, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(s.DNSPort)))
		if err != nil {
			return fmt.Errorf("egress proxy: %w", err)
		}
		closers = append(closers, dl)
		opened++
		wg.Add(3)
		go func() { defer wg.Done(); serveTCP(eng, tl.(*net.TCPListener)) }()
		go func() { defer wg.Done(); serveDNSUDP(ctx, eng, ul) }()
		go func() { defer wg.Done(); serveDNSTCP(ctx, eng, dl) }()
	}
	if opened == 0 {
		return errors.New("egress proxy: no loopback address to listen on")
	}
	if ready != nil {
		ready()
	}
	<-ctx.Done()
	return nil
}

func noIPv6(err error) bool {
	return errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.EAFNOSUPPORT)
}

// serveTCP hands every redirected connection to the engine.
func serveTCP(eng *netpolicy.Engine, ln *net.TCPListener) {
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // out of descriptors: let some close
			continue
		}
		go handle(eng, c)
	}
}

func handle(eng *netpolicy.Engine, c *net.TCPConn) {
	dst, err := originalDst(c)
	if err != nil {
		// Not redirected: a connection made to the proxy's own port.
		reset(c)
		return
	}
	src, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	eng.TCP(&redirected{c: c, flow: netstack.Flow{Proto: "tcp", Src: src, Dst: dst}})
}

// redirected is a connection the rules sent to the proxy, as the
// engine's netstack.TCPRequest: it is already established, so Accept
// hands it over and Reject resets it.
type redirected struct {
	c    *net.TCPConn
	flow netstack.Flow
}

func (r *redirected) Flow() netstack.Flow       { return r.flow }
func (r *redirected) Reject()                   { reset(r.c) }
func (r *redirected) Accept() (net.Conn, error) { return r.c, nil }

// reset closes c with a RST, as a refused SYN would be answered.
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	c.Close()
}

// originalDst is where c was sent before the rules redirected it
// (SO_ORIGINAL_DST, IP6T_SO_ORIGINAL_DST): ENOENT for a connection that
// was not redirected.
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var (
		dst  netip.AddrPort
		serr error
	)
	v6 := c.LocalAddr().(*net.TCPAddr).IP.To4() == nil
	cerr := rc.Control(func(fd uintptr) {
		const soOriginalDst = 80 // SO_ORIGINAL_DST and IP6T_SO_ORIGINAL_DST
		if v6 {
			var sa unix.RawSockaddrInet6
			l := uint32(unsafe.Sizeof(sa))
			serr = getsockopt(fd, unix.SOL_IPV6, soOriginalDst, unsafe.Pointer(&sa), &l)
			if serr == nil {
				port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
				dst = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port)
			}
			return
		}
		var sa unix.RawSockaddrInet4
		l := uint32(unsafe.Sizeof(sa))
		serr = getsockopt(fd, unix.SOL_IP, soOriginalDst, unsafe.Pointer(&sa), &l)
		if serr == nil {
			port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
			dst = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port)
		}
	})
	if cerr != nil {
		return netip.AddrPort{}, cerr
	}
	return dst, serr
}

func getsockopt(fd uintptr, level, opt int, p unsafe.Pointer, l *uint32) error {
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(l)), 0)
	if e != 0 {
		return e
	}
	return nil
}

func serveDNSUDP(ctx context.Context, eng *netpolicy.Engine, pc net.PacketConn) {
	sem := make(chan struct{}, dnsInFlight)
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			continue
		}
		query := append([]byte(nil), buf[:n]...)
		go func() {
			defer func() { <-sem }()
			src, _ := netip.ParseAddrPort(from.String())
			qctx, cancel := context.WithTimeout(ctx, dnsTimeout)
			defer cancel()
			if reply, err := eng.DNS(qctx, src, query); err == nil && len(reply) > 0 {
				_, _ = pc.WriteTo(reply, from)
			}
		}()
	}
}

func serveDNSTCP(ctx context.Context, eng *netpolicy.Engine, ln net.Listener) {
	conns := make(chan struct{}, dnsTCPConns)
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		select {
		case conns <- struct{}{}:
		default:
			c.Close()
			continue
		}
		go func() {
			defer func() { <-conns }()
			defer c.Close()
			stop := context.AfterFunc(ctx, func() { c.Close() })
			defer stop()
			src, _ := netip.ParseAddrPort(c.RemoteAddr().String())
			var hdr [2]byte
			for {
				_ = c.SetReadDeadline(time.Now().Add(dnsTCPIdle))
				if _, err := io.ReadFull(c, hdr[:]); err != nil {
					return
				}
				query := make([]byte, binary.BigEndian.Uint16(hdr[:]))
				if _, err := io.ReadFull(c, query); err != nil {
					return
				}
				qctx, cancel := context.WithTimeout(netstack.WithDNSOverTCP(ctx), dnsTimeout)
				reply, err := eng.DNS(qctx, src, query)
				cancel()
				if err != nil || len(reply) == 0 || len(reply) > 0xffff {
					return
				}
				_ = c.SetWriteDeadline(time.Now().Add(dnsTimeout))
				if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(reply))), reply...)); err != nil {
					return
				}
			}
		}()
	}
}

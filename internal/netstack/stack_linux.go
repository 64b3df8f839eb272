package netstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/agentkernel/agentkernel/internal/netstack/tundev"
)

const nicID tcpip.NICID = 1

// TCP buffer sizes: receive-buffer moderation grows each connection's
// window from the default towards the maximum as its throughput needs.
const (
	tcpBufMin     = 4 << 10
	tcpBufDefault = 1 << 20
	tcpBufMax     = 32 << 20
)

// Stack is a running user-space network stack serving one sandbox's TUN
// device.
type Stack struct {
	cfg    Config
	layout tundev.Layout
	log    *slog.Logger
	s      *stack.Stack
	link   *tunLink

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	closers  map[io.Closer]struct{} // listeners and host connections to close on Close
	udpFlows int
	tcpConns int // connection attempts in the Handler and accepted connections not yet closed

	tcpAccepted, tcpRejected atomic.Uint64
	udpFlowsTotal, udpRefuse atomic.Uint64
	dnsQueries, dnsFailed    atomic.Uint64
	published                atomic.Uint64

	closeOnce sync.Once
}

// New starts a stack on cfg.TUN. On failure the TUN file is closed.
func New(cfg Config) (st *Stack, err error) {
	if cfg.TUN == nil {
		return nil, errors.New("netstack: no TUN device")
	}
	tunTaken := false
	defer func() {
		if err != nil && !tunTaken {
			cfg.TUN.Close()
		}
	}()
	if cfg.Handler == nil {
		return nil, errors.New("netstack: no Handler")
	}
	if cfg.Layout == (tundev.Layout{}) {
		cfg.Layout = tundev.DefaultLayout()
	}
	if err := cfg.Layout.Validate(); err != nil {
		return nil, fmt.Errorf("netstack: %w", err)
	}
	if cfg.UDPIdleTimeout <= 0 {
		cfg.UDPIdleTimeout = 60 * time.Second
	}
	if cfg.MaxUDPFlows <= 0 {
		cfg.MaxUDPFlows = 1024
	}
	if cfg.MaxPendingTCP <= 0 {
		cfg.MaxPendingTCP = 1024
	}
	if cfg.MaxTCPConns <= 0 {
		cfg.MaxTCPConns = 4096
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}

	st = &Stack{
		cfg:     cfg,
		layout:  cfg.Layout,
		log:     log,
		closers: make(map[io.Closer]struct{}),
	}
	st.ctx, st.cancel = context.WithCancel(context.Background())

	st.s = stack.New(stack.Options{
		NetworkProtocols: []stack.NetworkProtocolFactory{
			ipv4.NewProtocol,
			ipv6.NewProtocolWithOptions(ipv6.Options{
				// Nothing else is on the link: no duplicate address
				// detection and no router solicitations.
				DADConfigs: stack.DADConfigurations{DupAddrDetectTransmits: 0},
				NDPConfigs: ipv6.NDPConfigurations{MaxRtrSolicitations: 0},
			}),
		},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	fail := func(format string, args ...any) (*Stack, error) {
		if st.link != nil {
			st.link.Close()
			st.link.Wait()
		}
		st.s.Destroy()
		st.cancel()
		return nil, fmt.Errorf("netstack: "+format, args...)
	}
	if err := st.tuneTCP(); err != nil {
		return fail("%v", err)
	}

	link, err := newTUNLink(cfg.TUN, uint32(cfg.Layout.MTU))
	tunTaken = true
	if err != nil {
		return fail("%v", err)
	}
	st.link = link
	if e := st.s.CreateNICWithOptions(nicID, st.link, stack.NICOptions{Name: "tun"}); e != nil {
		return fail("creating the NIC: %v", e)
	}
	// Every destination terminates here (promiscuous), and replies leave
	// from whatever address the sandbox sent to (spoofing).
	if e := st.s.SetPromiscuousMode(nicID, true); e != nil {
		return fail("promiscuous mode: %v", e)
	}
	if e := st.s.SetSpoofing(nicID, true); e != nil {
		return fail("spoofing: %v", e)
	}
	l := cfg.Layout
	addrs := []netip.Prefix{
		netip.PrefixFrom(l.Gateway4, l.Addr4.Bits()),
		netip.PrefixFrom(l.DNS4, l.Addr4.Bits()),
	}
	routes := []tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: nicID}}
	if l.HasIPv6() {
		addrs = append(addrs, netip.PrefixFrom(l.Gateway6, l.Addr6.Bits()), netip.PrefixFrom(l.DNS6, l.Addr6.Bits()))
		routes = append(routes, tcpip.Route{Destination: header.IPv6EmptySubnet, NIC: nicID})
	}
	for _, p := range addrs {
		pa := tcpip.ProtocolAddress{
			Protocol:          protoOf(p.Addr()),
			AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpAddr(p.Addr()), PrefixLen: p.Bits()},
		}
		if e := st.s.AddProtocolAddress(nicID, pa, stack.AddressProperties{}); e != nil {
			return fail("adding %s: %v", p, e)
		}
	}
	st.s.SetRouteTable(routes)

	fwd := tcp.NewForwarder(st.s, tcpBufDefault, cfg.MaxPendingTCP, st.handleTCP)
	st.s.SetTransportProtocolHandler(tcp.ProtocolNumber, fwd.HandlePacket)
	ufwd := udp.NewForwarder(st.s, st.handleUDP)
	st.s.SetTransportProtocolHandler(udp.ProtocolNumber, ufwd.HandlePacket)

	if err := st.startDNS(); err != nil {
		st.Close()
		return nil, fmt.Errorf("netstack: DNS: %w", err)
	}
	// Only now, with every handler in place, does the stack read what the
	// sandbox sent (or at Start, for a held stack).
	if !cfg.Held {
		st.link.open()
	}
	return st, nil
}

// Start lets a stack made with Config.Held read from its device. It does
// nothing on a stack already reading or closed.
func (st *Stack) Start() { st.link.open() }

func (st *Stack) tuneTCP() error {
	opts := []tcpip.SettableTransportProtocolOption{
		ptr(tcpip.TCPSACKEnabled(true)),
		ptr(tcpip.CongestionControlOption("cubic")),
		ptr(tcpip.TCPModerateReceiveBufferOption(true)),
		&tcpip.TCPReceiveBufferSizeRangeOption{Min: tcpBufMin, Default: tcpBufDefault, Max: tcpBufMax},
		&tcpip.TCPSendBufferSizeRangeOption{Min: tcpBufMin, Default: tcpBufDefault, Max: tcpBufMax},
		ptr(tcpip.TCPDelayEnabled(false)),
		// The stack's TIME-WAIT endpoints would swallow a new SYN from a
		// sandbox port used again (only a listening endpoint, never the
		// forwarder, takes over a TIME-WAIT tuple), so that connection
		// would wait for the client's SYN retransmission. On a device
		// between two local stacks no old duplicate can arrive late.
		ptr(tcpip.TCPTimeWaitTimeoutOption(time.Second)),
	}
	for _, o := range opts {
		if e := st.s.SetTransportProtocolOption(tcp.ProtocolNumber, o); e != nil {
			return fmt.Errorf("TCP option %T: %v", o, e)
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

func protoOf(a netip.Addr) tcpip.NetworkProtocolNumber {
	if a.Is4() {
		return ipv4.ProtocolNumber
	}
	return ipv6.ProtocolNumber
}

func tcpAddr(a netip.Addr) tcpip.Address { return tcpip.AddrFromSlice(a.AsSlice()) }

func netAddr(a tcpip.Address) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return ip
}

// track registers c to be closed by Close; it reports false (and closes
// c) when the stack is already closed.
func (st *Stack) track(c io.Closer) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		c.Close()
		return false
	}
	st.closers[c] = struct{}{}
	return true
}

func (st *Stack) untrack(c io.Closer) {
	st.mu.Lock()
	delete(st.closers, c)
	st.mu.Unlock()
}

// goTracked runs f on a goroutine that Close waits for; it reports false
// (and does not run f) once the stack is closed.
func (st *Stack) goTracked(f func()) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return false
	}
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		f()
	}()
	return true
}

// Layout is the addressing the stack serves.
func (st *Stack) Layout() tundev.Layout { return st.layout }

// Metrics returns the stack's counters.
func (st *Stack) Metrics() Metrics {
	m := Metrics{
		TCPAccepted: st.tcpAccepted.Load(),
		TCPRejected: st.tcpRejected.Load(),
		UDPFlows:    st.udpFlowsTotal.Load(),
		UDPRefused:  st.udpRefuse.Load(),
		DNSQueries:  st.dnsQueries.Load(),
		DNSFailed:   st.dnsFailed.Load(),
		Published:   st.published.Load(),
	}
	if info, ok := st.s.NICInfo()[nicID]; ok {
		m.RxBytes = info.Stats.Rx.Bytes.Value()
		m.RxPackets = info.Stats.Rx.Packets.Value()
		m.TxBytes = info.Stats.Tx.Bytes.Value()
		m.TxPackets = info.Stats.Tx.Packets.Value()
	}
	return m
}

// Close stops the stack: published ports and the resolver stop
// listening, every connection and flow through the stack is aborted,
// Handler calls in progress see their contexts cancelled, and Close
// waits for all the stack's goroutines before it closes the TUN device.
// It is safe to call more than once.
func (st *Stack) Close() error {
	st.closeOnce.Do(func() {
		st.mu.Lock()
		st.closed = true
		closers := st.closers
		st.closers = nil
		st.mu.Unlock()
		st.cancel()
		for c := range closers {
			c.Close()
		}
		// Abort every endpoint: the sandbox's ends of accepted
		// connections and relayed flows fail their reads and writes.
		st.s.Close()
		st.wg.Wait()
		// Endpoints made while the goroutines above were ending.
		st.s.Close()
		// Stop the reader before the NIC goes: the stack removes it, and
		// waits for the link, holding a lock that delivering a packet
		// needs.
		st.link.Close()
		st.link.Wait()
		st.s.Wait()
		st.s.Destroy()
	})
	return nil
}

// dialSandbox opens a TCP connection from the gateway address to the
// sandbox's address and port through the stack.
func (st *Stack) dialSandbox(ctx context.Context, port uint16, v6 bool) (*gonet.TCPConn, error) {
	addr := st.layout.Addr4.Addr()
	if v6 && st.layout.HasIPv6() {
		addr = st.layout.Addr6.Addr()
	}
	return gonet.DialContextTCP(ctx, st.s, tcpip.FullAddress{NIC: nicID, Addr: tcpAddr(addr), Port: port}, protoOf(addr))
}

var _ net.Conn = (*gonet.TCPConn)(nil)

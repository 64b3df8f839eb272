package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/netstack"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Defaults of Options.
const (
	DefaultResolvConf   = "/etc/resolv.conf"
	DefaultDialTimeout  = 10 * time.Second
	DefaultDNSTimeout   = 3 * time.Second
	DefaultMinTTL       = 10 * time.Minute
	DefaultMaxTTL       = 24 * time.Hour
	DefaultMaxNames     = 65536
	DefaultMaxDNSFlight = 128
	DefaultMaxConns     = 4096
	// inspectLimit is how much of a connection's first bytes the engine
	// reads to find a TLS SNI or an HTTP Host before it gives up.
	inspectLimit = 64 << 10
	// maxListEntries bounds each list of a policy (hostile specs).
	maxListEntries = 4096
)

// Options are the engine's surroundings. The zero value takes everything
// from the host.
type Options struct {
	// HostAddrs are the host's own addresses, refused in every mode. Nil:
	// the addresses of the host's interfaces (net.InterfaceAddrs).
	HostAddrs []netip.Addr
	// SandboxNet are the ranges of the sandbox's own network (its address,
	// gateway and resolver), never dialled on the host: a host network
	// that happens to use the same range is not the sandbox's to reach.
	// Nil: 10.0.2.0/24 and fd00::/64.
	SandboxNet []netip.Prefix
	// Resolvers are the upstream DNS servers. Nil: the nameservers of
	// ResolvConf.
	Resolvers []netip.AddrPort
	// ResolvConf is read when Resolvers is nil; "" is /etc/resolv.conf.
	ResolvConf string
	// Dialer makes upstream TCP connections. Nil: a HostDialer over the
	// host's proxy environment (HTTPS_PROXY, NO_PROXY, ...).
	Dialer Dialer
	// OnDeny is called for the first refusal of each distinct kind,
	// target and hint (at most 256 per engine; Stats counts them all), on
	// the goroutine that refused, before the sandbox sees the refusal; it
	// must not block.
	OnDeny func(Denial)
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// DialTimeout bounds an upstream dial (default 10s); DNSTimeout one
	// upstream DNS exchange (default 3s).
	DialTimeout, DNSTimeout time.Duration
	// MinTTL is the least time a name's addresses stay reachable after an
	// answer, whatever its TTL (default 10 minutes: clients cache longer
	// than they should).
	MinTTL time.Duration
	// MaxNames bounds the name -> address table (default 65536 pairs).
	MaxNames int
	// MaxConns bounds the TCP connections served at once (default 4096):
	// each holds a host socket, and a sandbox must not exhaust the host's.
	MaxConns int
	// Inject, when set, makes the engine add secrets to the requests of
	// bound hosts (TLS terminated with the sandbox's CA, re-encrypted to
	// the verified upstream); nil intercepts nothing.
	Inject *Injection
	// OnInject is called once per request a secret was added to, with
	// the secret's name and the host (never the value), on the
	// goroutine that serves the request; it must not block.
	OnInject func(key, host string)
}

// Dialer makes the engine's upstream TCP connections. name is the allowed
// name that the engine knows for addr ("" if none), for proxies that
// should see names.
type Dialer interface {
	DialTCP(ctx context.Context, name string, addr netip.AddrPort) (net.Conn, error)
}

// Engine decides and serves a sandbox's flows. It implements
// netstack.Handler and is safe for concurrent use.
type Engine struct {
	mode       sandbox.NetworkMode
	filtered   bool
	allow      []string // domain patterns, lower case
	block      []string
	allowCIDRs []netip.Prefix
	blockAddrs map[netip.Addr]struct{}
	allowAddrs map[netip.Addr]struct{} // IP literals in AllowDomains
	udp        []udpRule
	hostAddrs  map[netip.Addr]struct{}
	sandboxNet []netip.Prefix

	resolvers   []netip.AddrPort
	dialer      Dialer
	onDeny      func(Denial)
	now         func() time.Time
	dialTimeout time.Duration
	dnsTimeout  time.Duration
	minTTL      time.Duration
	dnsFlight   chan struct{}

	names  *nameTable
	stats  counters
	inject *injector // nil: nothing intercepted
	log    denialLog

	mu       sync.Mutex
	closed   bool
	conns    map[net.Conn]struct{}
	maxConns int
	pending  int // connections being dialled
	// proxies are the ServeProxy loops running; proxyClients the client
	// connections they hold, all of them together.
	proxies      map[*proxyServer]struct{}
	proxyClients int
	headTimeout  time.Duration // proxyHeadTimeout; shorter in tests
}

var _ netstack.Handler = (*Engine)(nil)

type udpRule struct {
	prefix  netip.Prefix // valid for CIDR:PORT
	pattern string       // for HOST:PORT
	port    uint16
}

// Compile checks a network policy and builds its engine. Mode none gives
// an engine that refuses everything.
func Compile(n sandbox.Network, o Options) (*Engine, error) {
	e := &Engine{
		mode:        n.Mode,
		filtered:    n.Mode == sandbox.NetworkFiltered,
		blockAddrs:  map[netip.Addr]struct{}{},
		allowAddrs:  map[netip.Addr]struct{}{},
		hostAddrs:   map[netip.Addr]struct{}{},
		dialer:      o.Dialer,
		onDeny:      o.OnDeny,
		now:         o.Now,
		dialTimeout: o.DialTimeout,
		dnsTimeout:  o.DNSTimeout,
		minTTL:      o.MinTTL,
		dnsFlight:   make(chan struct{}, DefaultMaxDNSFlight),
		conns:       map[net.Conn]struct{}{},
		headTimeout: proxyHeadTimeout,
	}
	switch n.Mode {
	case sandbox.NetworkNone, sandbox.NetworkFiltered, sandbox.NetworkFull:
	case "":
		return nil, errors.New("network policy: the mode is not set (none, filtered or full)")
	default:
		return nil, fmt.Errorf("network policy: unknown mode %q (none, filtered or full)", n.Mode)
	}
	for name, list := range map[string][]string{"allow_domains": n.AllowDomains, "block_domains": n.BlockDomains, "allow_cidrs": n.AllowCIDRs, "allow_udp": n.AllowUDP} {
		if len(list) > maxListEntries {
			return nil, fmt.Errorf("network policy: %s has %d entries, more than %d", name, len(list), maxListEntries)
		}
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.dialTimeout <= 0 {
		e.dialTimeout = DefaultDialTimeout
	}
	if e.dnsTimeout <= 0 {
		e.dnsTimeout = DefaultDNSTimeout
	}
	if e.minTTL <= 0 {
		e.minTTL = DefaultMinTTL
	}
	e.maxConns = o.MaxConns
	if e.maxConns <= 0 {
		e.maxConns = DefaultMaxConns
	}
	maxNames := o.MaxNames
	if maxNames <= 0 {
		maxNames = DefaultMaxNames
	}
	e.names = newNameTable(maxNames)

	for _, p := range n.AllowDomains {
		if err := config.ValidateDomainPattern(p); err != nil {
			return nil, fmt.Errorf("network policy: allowed domain: %w", err)
		}
		if a, err := netip.ParseAddr(p); err == nil {
			e.allowAddrs[canonical(a)] = struct{}{}
			continue
		}
		e.allow = append(e.allow, strings.ToLower(p))
	}
	for _, p := range append(append([]string(nil), n.BlockDomains...), metadataNames...) {
		if err := config.ValidateDomainPattern(p); err != nil {
			return nil, fmt.Errorf("network policy: blocked domain: %w", err)
		}
		if a, err := netip.ParseAddr(p); err == nil {
			e.blockAddrs[canonical(a)] = struct{}{}
			continue
		}
		e.block = append(e.block, strings.ToLower(p))
	}
	for _, c := range n.AllowCIDRs {
		p, err := config.ParseCIDR(c)
		if err != nil {
			return nil, fmt.Errorf("network policy: allowed CIDR: %w", err)
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0)).Masked()
		}
		e.allowCIDRs = append(e.allowCIDRs, p)
	}
	for _, u := range n.AllowUDP {
		r, err := parseUDPRule(u)
		if err != nil {
			return nil, fmt.Errorf("network policy: %w", err)
		}
		e.udp = append(e.udp, r)
	}

	e.sandboxNet = o.SandboxNet
	if e.sandboxNet == nil {
		e.sandboxNet = []netip.Prefix{netip.MustParsePrefix("10.0.2.0/24"), netip.MustParsePrefix("fd00::/64")}
	}
	hostAddrs := o.HostAddrs
	if hostAddrs == nil {
		hostAddrs = interfaceAddrs()
	}
	for _, a := range hostAddrs {
		e.hostAddrs[canonical(a)] = struct{}{}
	}
	e.resolvers = o.Resolvers
	if e.resolvers == nil && n.Mode.Egress() {
		path := o.ResolvConf
		if path == "" {
			path = DefaultResolvConf
		}
		rs, err := ReadResolvConf(path)
		if err != nil {
			return nil, fmt.Errorf("network policy: %w", err)
		}
		e.resolvers = rs
	}
	if e.dialer == nil {
		d, err := NewHostDialer(nil)
		if err != nil {
			return nil, fmt.Errorf("network policy: %w", err)
		}
		e.dialer = d
	}
	if o.Inject != nil {
		inj, err := compileInjection(e, o.Inject, o.OnInject)
		if err != nil {
			return nil, err
		}
		e.inject = inj
	}
	return e, nil
}

func parseUDPRule(s string) (udpRule, error) {
	if err := config.ValidateUDPRule(s); err != nil {
		return udpRule{}, err
	}
	host, port, _ := net.SplitHostPort(s)
	n, _ := strconv.ParseUint(port, 10, 16)
	r := udpRule{port: uint16(n)}
	if p, err := config.ParseCIDR(host); err == nil {
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0)).Masked()
		}
		r.prefix = p
	} else {
		r.pattern = strings.ToLower(host)
	}
	return r, nil
}

// interfaceAddrs lists the host's own addresses; an error gives none.
func interfaceAddrs() []netip.Addr {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}

// Mode is the policy's mode.
func (e *Engine) Mode() sandbox.NetworkMode { return e.mode }

// blockedBy returns the block pattern that name matches, "" if none.
func (e *Engine) blockedBy(name string) string {
	for _, p := range e.block {
		if policy.DomainMatches(p, name) {
			return p
		}
	}
	return ""
}

// allowedName reports whether the sandbox may resolve name (and reach
// what it resolves to): not blocked and, in filtered mode, allowed.
func (e *Engine) allowedName(name string) bool {
	if !e.mode.Egress() || e.blockedBy(name) != "" {
		return false
	}
	if !e.filtered {
		return true
	}
	for _, p := range e.allow {
		if policy.DomainMatches(p, name) {
			return true
		}
	}
	return false
}

// resolvable reports whether a query for name is forwarded: an allowed
// name, or in filtered mode one that only an AllowUDP rule names.
func (e *Engine) resolvable(name string) bool {
	if e.allowedName(name) {
		return true
	}
	if !e.mode.Egress() || e.blockedBy(name) != "" {
		return false
	}
	for _, r := range e.udp {
		if r.pattern != "" && policy.DomainMatches(r.pattern, name) {
			return true
		}
	}
	return false
}

// Close ends every connection the engine serves, ends its ServeProxy
// loops (closing their listeners) and refuses new connections.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	conns := e.conns
	e.conns = map[net.Conn]struct{}{}
	proxies := e.proxies
	e.proxies = nil
	e.mu.Unlock()
	for s := range proxies {
		s.shutdown()
	}
	if e.inject != nil {
		e.inject.close()
	}
	for c := range conns {
		c.Close()
	}
	return nil
}

// reserve claims a place for a new connection: false when the engine is
// closed or serves MaxConns connections already (full reports which).
func (e *Engine) reserve() (ok, full bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false, false
	}
	if len(e.conns)/2+e.pending >= e.maxConns {
		return false, true
	}
	e.pending++
	return true, false
}

func (e *Engine) unreserve() {
	e.mu.Lock()
	e.pending--
	e.mu.Unlock()
}

// track registers conns for Close; false when the engine is closed.
func (e *Engine) track(cs ...net.Conn) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	for _, c := range cs {
		e.conns[c] = struct{}{}
	}
	return true
}

func (e *Engine) untrack(cs ...net.Conn) {
	e.mu.Lock()
	for _, c := range cs {
		delete(e.conns, c)
	}
	e.mu.Unlock()
}

// active is the number of connections (both ends counted) being served.
func (e *Engine) active() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.conns)
}

// nameDenial is the refusal of a name the policy does not let through
// (the resolver's NXDOMAIN, the proxy's 403): why, and the flag that
// would allow it.
func (e *Engine) nameDenial(name string) Denial {
	d := Denial{Kind: KindDNS, Name: name}
	switch b := e.blockedBy(name); {
	case b != "":
		d.Reason = fmt.Sprintf("matches the block list (%s)", b)
	case !e.mode.Egress():
		d.Reason = "network access is off"
	default:
		d.Reason = "not in the allow list"
		d.Allow = allowDomainHint(name)
	}
	return d
}

package netpolicy

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/agentkernel/agentkernel/internal/netstack"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

func TestAllowedNameResolvesAndConnects(t *testing.T) {
	w := needWorld(t)
	e, ds := w.newEngine(t, filtered("*.allowed.test"), Options{})

	r := query(t, e, "api.allowed.test", dns.TypeA, false)
	if r.Rcode != dns.RcodeSuccess || !slices.Equal(addrs(r), []string{"198.18.0.10"}) {
		t.Fatalf("A api.allowed.test: %s %v", dns.RcodeToString[r.Rcode], addrs(r))
	}
	r = query(t, e, "API.Allowed.Test.", dns.TypeAAAA, true)
	if !slices.Equal(addrs(r), []string{"2001:2::10"}) {
		t.Fatalf("AAAA api.allowed.test: %v", addrs(r))
	}

	c, err := connect(t, e, "198.18.0.10:443")
	if err != nil {
		t.Fatal(err)
	}
	body, err := w.httpsGet(c, "api.allowed.test")
	if err != nil || body != "host=api.allowed.test" {
		t.Fatalf("HTTPS through the engine: %q, %v", body, err)
	}
	c, err = connect(t, e, "[2001:2::10]:80")
	if err != nil {
		t.Fatal(err, ds.all(), e.Stats())
	}
	if body, err := httpGet(c, "api.allowed.test"); err != nil || body != "host=api.allowed.test" {
		t.Fatalf("HTTP over IPv6 through the engine: %q, %v", body, err)
	}
	// The server speaks first, the client says nothing: the banner must
	// come through at once, and an echo after it.
	c, err = connect(t, e, "198.18.0.10:22")
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "SSH-2.0-test\r\n" {
		t.Fatalf("server-first banner: %q, %v", buf[:n], err)
	}
	c.Write([]byte("SSH-2.0-client\r\n"))
	n, err = c.Read(buf)
	if err != nil || string(buf[:n]) != "SSH-2.0-client\r\n" {
		t.Fatalf("echo: %q, %v", buf[:n], err)
	}
	// Half-close: the client's end of stream reaches the server, whose
	// own end comes back.
	c.(*net.TCPConn).CloseWrite()
	if _, err := c.Read(buf); err == nil {
		t.Fatal("the server's end of stream did not come back after a half-close")
	}

	// A CNAME chain: the name asked for is what counts.
	r = query(t, e, "cdn.allowed.test", dns.TypeA, false)
	if !slices.Equal(addrs(r), []string{"198.18.0.12"}) {
		t.Fatalf("cdn.allowed.test: %v", addrs(r))
	}
	c, err = connect(t, e, "198.18.0.12:443")
	if err != nil {
		t.Fatal(err)
	}
	if body, err := w.httpsGet(c, "cdn.allowed.test"); err != nil || body != "host=cdn.allowed.test" {
		t.Fatalf("through a CNAME: %q, %v", body, err)
	}
	if l := ds.all(); len(l) != 0 {
		t.Fatalf("denials for allowed traffic: %v", l)
	}
	s := e.Stats()
	if s.Allowed[KindTCP] != 4 || s.Allowed[KindSNI] != 2 || s.Allowed[KindDNS] != 3 || s.DNSQueries != 3 {
		t.Fatalf("stats: %+v", s)
	}
}

func TestBlockedNameAndItsAddress(t *testing.T) {
	w := needWorld(t)
	e, ds := w.newEngine(t, filtered("*.allowed.test"), Options{})

	start := time.Now()
	r := query(t, e, "blocked.test", dns.TypeA, true)
	if r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
		t.Fatalf("blocked.test: %s %v", dns.RcodeToString[r.Rcode], r.Answer)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("NXDOMAIN took %v", d)
	}
	if opt := r.IsEdns0(); opt == nil || len(opt.Option) == 0 {
		t.Error("no Extended DNS Error in the refusal")
	}
	d := ds.last(t)
	if d.Kind != KindDNS || d.Name != "blocked.test" || d.Allow != "--allow-domain blocked.test" {
		t.Fatalf("denial: %+v", d)
	}
	// Directly by address.
	if _, err := connect(t, e, "198.18.0.20:443"); err != errRejected {
		t.Fatalf("connection to a blocked name's address: %v", err)
	}
	d = ds.last(t)
	if d.Kind != KindTCP || d.Allow != "--allow-cidr 198.18.0.20/32" {
		t.Fatalf("denial: %+v", d)
	}
	// An allowed name whose answer leads to a blocked one.
	n := filtered("*.allowed.test")
	n.BlockDomains = append(n.BlockDomains, "evil.blocked.test")
	e2, _ := w.newEngine(t, n, Options{})
	if r := query(t, e2, "tobad.allowed.test", dns.TypeA, false); r.Rcode != dns.RcodeNameError {
		t.Fatalf("CNAME to a blocked name: %s %v", dns.RcodeToString[r.Rcode], addrs(r))
	}
	// ANY is refused; malformed input is FORMERR.
	if r := query(t, e, "api.allowed.test", dns.TypeANY, false); r.Rcode != dns.RcodeRefused {
		t.Fatalf("ANY: %s", dns.RcodeToString[r.Rcode])
	}
	out, err := e.DNS(context.Background(), sandboxSrc, []byte{0xab, 0xcd, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xff})
	if err != nil || len(out) < 12 || out[0] != 0xab || out[1] != 0xcd || out[3]&0xf != dns.RcodeFormatError {
		t.Fatalf("malformed query: %x, %v", out, err)
	}
	sum := e.Summary()
	if !strings.Contains(sum, "blocked.test") || !strings.Contains(sum, "--allow-domain blocked.test") || !strings.Contains(sum, "--allow-cidr 198.18.0.20/32") {
		t.Fatalf("summary: %q", sum)
	}
	if s := e.Stats(); s.Denied[KindDNS] != 1 || s.Denied[KindTCP] != 1 {
		t.Fatalf("stats: %+v", s)
	}
}

func TestSNIAndHostMismatch(t *testing.T) {
	w := needWorld(t)
	e, ds := w.newEngine(t, filtered("*.allowed.test"), Options{})
	query(t, e, "api.allowed.test", dns.TypeA, false)
	query(t, e, "other.allowed.test", dns.TypeA, false)

	// SNI of an allowed name that resolved elsewhere.
	c, err := connect(t, e, "198.18.0.10:443")
	if err != nil {
		t.Fatal(err)
	}
	if body, err := w.httpsGet(c, "other.allowed.test"); err == nil {
		t.Fatalf("TLS with another name's SNI got through: %q", body)
	}
	if d := ds.last(t); d.Kind != KindSNI || d.Name != "other.allowed.test" {
		t.Fatalf("denial: %+v", d)
	}
	// SNI of a name not allowed at all.
	c, _ = connect(t, e, "198.18.0.10:443")
	if _, err := w.httpsGet(c, "blocked.test"); err == nil {
		t.Fatal("TLS with a blocked SNI got through")
	}
	if d := ds.last(t); d.Kind != KindSNI || d.Allow != "--allow-domain blocked.test" {
		t.Fatalf("denial: %+v", d)
	}
	// Host header: another name, then two Hosts, then the right one.
	c, _ = connect(t, e, "198.18.0.10:80")
	if body, err := httpGet(c, "other.allowed.test"); err == nil {
		t.Fatalf("HTTP with another name's Host got through: %q", body)
	}
	if d := ds.last(t); d.Kind != KindHost || d.Name != "other.allowed.test" {
		t.Fatalf("denial: %+v", d)
	}
	c, _ = connect(t, e, "198.18.0.10:80")
	if body, err := httpGet(c, "api.allowed.test\r\nHost: blocked.test"); err == nil {
		t.Fatalf("two Hosts got through: %q", body)
	}
	c, _ = connect(t, e, "198.18.0.10:80")
	c.Write([]byte("GET http://blocked.test/ HTTP/1.1\r\n"))
	time.Sleep(50 * time.Millisecond) // in two pieces
	if body, err := httpGet(c, "api.allowed.test"); err == nil {
		t.Fatalf("absolute-form target of a blocked name got through: %q", body)
	}
	// Disguises a lenient server would still read as a request for another
	// name: a lower-case method after empty lines.
	before := e.Stats().Denied[KindHost]
	c, _ = connect(t, e, "198.18.0.10:80")
	c.Write([]byte("\r\nget / HTTP/1.1\r\nHost: other.allowed.test\r\n\r\n"))
	if n, _ := c.Read(make([]byte, 100)); n != 0 {
		t.Fatal("a disguised request for another name got an answer")
	}
	if e.Stats().Denied[KindHost] != before+1 {
		t.Fatalf("no denial for the disguised request: %+v", e.Stats())
	}
	c, _ = connect(t, e, "198.18.0.10:80")
	if body, err := httpGet(c, "api.allowed.test:80"); err != nil || body != "host=api.allowed.test:80" {
		t.Fatalf("right Host: %q, %v", body, err)
	}

	// Full mode: only the block list counts.
	ef, dsf := w.newEngine(t, full("blocked.test"), Options{})
	c, _ = connect(t, ef, "198.18.0.10:443")
	if body, err := w.httpsGet(c, "other.allowed.test"); err != nil || body != "host=other.allowed.test" {
		t.Fatalf("full mode, unblocked SNI: %q, %v", body, err)
	}
	c, _ = connect(t, ef, "198.18.0.10:443")
	if _, err := w.httpsGet(c, "blocked.test"); err == nil {
		t.Fatal("full mode: TLS with a blocked SNI got through")
	}
	if d := dsf.last(t); d.Kind != KindSNI || d.Name != "blocked.test" || d.Allow != "" {
		t.Fatalf("denial: %+v", d)
	}
}

func TestRebindingDropped(t *testing.T) {
	w := needWorld(t)
	e, ds := w.newEngine(t, filtered("*.allowed.test"), Options{})
	for _, name := range []string{"rebind-lo.allowed.test", "rebind-md.allowed.test", "rebind-host.allowed.test"} {
		r := query(t, e, name, dns.TypeA, false)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
			t.Errorf("%s: %s %v, want an empty NOERROR", name, dns.RcodeToString[r.Rcode], r.Answer)
		}
		if d := ds.last(t); d.Kind != KindDNS || d.Name != name || !strings.Contains(d.Reason, "rebinding") {
			t.Errorf("denial: %+v", d)
		}
	}
	r := query(t, e, "mapped.allowed.test", dns.TypeAAAA, false)
	if len(r.Answer) != 0 {
		t.Errorf("IPv4-mapped / NAT64 metadata address kept: %v", r.Answer)
	}
	r = query(t, e, "rebind-priv.allowed.test", dns.TypeA, false)
	if !slices.Equal(addrs(r), []string{"198.18.0.13"}) {
		t.Errorf("rebind-priv: %v, want only the public address", addrs(r))
	}
	r = query(t, e, "svc.allowed.test", dns.TypeHTTPS, false)
	if len(r.Answer) != 1 || strings.Contains(r.Answer[0].String(), "ipv4hint") {
		t.Errorf("HTTPS record: %v, want it without address hints", r.Answer)
	}
	// The dropped addresses were never remembered.
	for _, a := range []string{"127.0.0.1:80", "169.254.169.254:80", "10.1.2.3:80", "198.18.0.99:80"} {
		if _, err := connect(t, e, a); err != errRejected {
			t.Errorf("connect %s: %v", a, err)
		}
	}
	if _, err := connect(t, e, "198.18.0.13:80"); err != nil {
		t.Errorf("connect to the kept address: %v", err)
	}
	// Same in full mode: private ranges allowed there, the rest not.
	ef, _ := w.newEngine(t, full(), Options{})
	r = query(t, ef, "rebind-priv.allowed.test", dns.TypeA, false)
	if !slices.Equal(addrs(r), []string{"10.1.2.3", "198.18.0.13"}) {
		t.Errorf("full mode rebind-priv: %v", addrs(r))
	}
	r = query(t, ef, "rebind-md.allowed.test", dns.TypeA, false)
	if len(r.Answer) != 0 {
		t.Errorf("full mode metadata answer kept: %v", r.Answer)
	}
}

func TestRefusedAddressesFullMode(t *testing.T) {
	w := needWorld(t)
	e, ds := w.newEngine(t, full(), Options{})
	for _, a := range []string{
		"169.254.169.254:80", "[::ffff:169.254.169.254]:80", "[64:ff9b::a9fe:a9fe]:80",
		"[fd00:ec2::254]:80", "100.100.100.200:80", "127.0.0.1:80", "[::1]:80",
		"[::ffff:127.0.0.1]:80", "0.0.0.0:80", "[::]:80", "224.0.0.1:80", "255.255.255.255:80",
		"169.254.1.1:80", "[fe80::1]:80", "198.18.0.99:80", "[::a9fe:a9fe]:80",
		w.loopback.String(),
	} {
		if _, err := connect(t, e, a); err != errRejected {
			t.Errorf("full mode connect %s: %v, want a RST", a, err)
			continue
		}
		if d := ds.last(t); d.Kind != KindTCP || d.Reason == "" {
			t.Errorf("denial for %s: %+v", a, d)
		}
	}
	d := ds.all()[0]
	if d.Reason != reasonMetadata || d.Allow != "" {
		t.Errorf("metadata denial: %+v", d)
	}
	// The sandbox's own network (its gateway, its resolver) is the stack
	// itself: no --allow-cidr is offered, which would dial the host's
	// network instead.
	for _, a := range []string{"10.0.2.2:8080", "[fd00::3]:8080"} {
		if _, err := connect(t, e, a); err != errRejected {
			t.Errorf("connect %s: %v, want a RST", a, err)
			continue
		}
		if d := ds.last(t); d.Reason != reasonSandboxNet || d.Allow != "" {
			t.Errorf("denial for %s: %+v", a, d)
		}
	}
	// Metadata names are refused even when the block list forgets them.
	e0, _ := w.newEngine(t, sandbox.Network{Mode: sandbox.NetworkFull}, Options{})
	for _, name := range []string{"metadata.google.internal", "METADATA.goog."} {
		if r := query(t, e0, name, dns.TypeA, false); r.Rcode != dns.RcodeNameError {
			t.Errorf("%s: %s", name, dns.RcodeToString[r.Rcode])
		}
	}
	// Any other address goes, by address alone.
	c, err := connect(t, e, "198.18.0.20:80")
	if err != nil {
		t.Fatal(err)
	}
	if body, err := httpGet(c, "whatever.test"); err != nil || body != "host=whatever.test" {
		t.Fatalf("full mode: %q, %v", body, err)
	}
	// A destination that is not there is a fast RST, not a hang.
	start := time.Now()
	if _, err := connect(t, e, "198.18.0.11:81"); err != errRejected {
		t.Fatalf("closed port: %v", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatalf("closed port took %v", time.Since(start))
	}
	if e.Stats().DialErrors != 1 {
		t.Fatalf("dial errors: %+v", e.Stats())
	}
}

func TestAllowCIDRsOverride(t *testing.T) {
	w := needWorld(t)
	lo := w.loopback.Addr().String()
	n := filtered("*.allowed.test")
	e, _ := w.newEngine(t, n, Options{})
	if _, err := connect(t, e, w.loopback.String()); err != errRejected {
		t.Fatalf("host loopback without --allow-cidr: %v", err)
	}
	if _, err := connect(t, e, "198.18.0.20:80"); err != errRejected {
		t.Fatalf("unnamed address without --allow-cidr: %v", err)
	}
	n.AllowCIDRs = []string{lo + "/32", "198.18.0.20/31", "10.1.2.0/24"}
	e, _ = w.newEngine(t, n, Options{})
	c, err := connect(t, e, w.loopback.String())
	if err != nil {
		t.Fatalf("host loopback with --allow-cidr: %v", err)
	}
	if body, err := httpGet(c, "localhost"); err != nil || body != "host=localhost" {
		t.Fatalf("%q, %v", body, err)
	}
	c, err = connect(t, e, "198.18.0.20:80")
	if err != nil {
		t.Fatalf("unnamed address with --allow-cidr: %v", err)
	}
	if body, err := httpGet(c, "198.18.0.20"); err != nil || body != "host=198.18.0.20" {
		t.Fatalf("%q, %v", body, err)
	}
	// A private answer in AllowCIDRs is kept.
	if r := query(t, e, "rebind-priv.allowed.test", dns.TypeA, false); len(addrs(r)) != 2 {
		t.Fatalf("rebind-priv with 10.1.2.0/24 allowed: %v", addrs(r))
	}
	// A metadata address by --allow-cidr too (explicit), but not its neighbours.
	n.AllowCIDRs = []string{"169.254.169.254"}
	e, _ = w.newEngine(t, n, Options{})
	if d := e.refused(netip.MustParseAddr("::ffff:169.254.169.254")); d != "" {
		t.Fatalf("allowed metadata refused: %s", d)
	}
	if d := e.refused(netip.MustParseAddr("169.254.169.253")); d == "" {
		t.Fatal("link-local neighbour allowed")
	}
}

func TestUDP(t *testing.T) {
	w := needWorld(t)
	n := filtered("*.allowed.test")
	e, ds := w.newEngine(t, n, Options{})
	flow := func(dst string) netstack.Flow {
		return netstack.Flow{Proto: "udp", Src: sandboxSrc, Dst: netip.MustParseAddrPort(dst)}
	}
	if _, err := e.UDP(context.Background(), flow("198.18.0.10:5353")); err == nil {
		t.Fatal("UDP without allow_udp went through")
	}
	if d := ds.last(t); d.Kind != KindUDP || d.Allow != `allow_udp = ["198.18.0.10:5353"] in [network]` {
		t.Fatalf("denial: %+v", d)
	}
	n.AllowUDP = []string{"198.18.0.10:5353", "udp.example.test:5353"}
	e, _ = w.newEngine(t, n, Options{})
	c, err := e.UDP(context.Background(), flow("198.18.0.10:5353"))
	if err != nil {
		t.Fatalf("allowed UDP: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	c.Write([]byte("ping"))
	buf := make([]byte, 16)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("UDP echo: %q, %v", buf[:n], err)
	}
	if _, err := e.UDP(context.Background(), flow("198.18.0.10:5354")); err == nil {
		t.Fatal("UDP to another port went through")
	}
	// A name rule: the name resolves (only because allow_udp names it) and
	// its address is then open for UDP on that port, not for TCP.
	n.AllowUDP = []string{"udp.example.test:5353"}
	e, _ = w.newEngine(t, n, Options{})
	if _, err := e.UDP(context.Background(), flow("198.18.0.10:5353")); err == nil {
		t.Fatal("UDP by name rule before the name resolved")
	}
	if r := query(t, e, "udp.example.test", dns.TypeA, false); !slices.Equal(addrs(r), []string{"198.18.0.10"}) {
		t.Fatalf("udp.example.test: %s %v", dns.RcodeToString[r.Rcode], addrs(r))
	}
	c, err = e.UDP(context.Background(), flow("198.18.0.10:5353"))
	if err != nil {
		t.Fatalf("UDP by name rule: %v", err)
	}
	c.Close()
	if _, err := connect(t, e, "198.18.0.10:80"); err != errRejected {
		t.Fatalf("TCP to a UDP-only name's address: %v", err)
	}
}

func TestProxyChaining(t *testing.T) {
	w := needWorld(t)
	env := map[string]string{
		"HTTPS_PROXY": "http://user:p%40ss@198.18.0.30:3128",
		"no_proxy":    "other.allowed.test, 198.18.0.13",
	}
	d, err := NewHostDialer(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	e, _ := w.newEngine(t, filtered("*.allowed.test"), Options{Dialer: d})
	query(t, e, "api.allowed.test", dns.TypeA, false)
	query(t, e, "other.allowed.test", dns.TypeA, false)
	c, err := connect(t, e, "198.18.0.10:443")
	if err != nil {
		t.Fatal(err)
	}
	if body, err := w.httpsGet(c, "api.allowed.test"); err != nil || body != "host=api.allowed.test" {
		t.Fatalf("through the proxy: %q, %v", body, err)
	}
	got := w.proxied()
	if len(got) == 0 || got[len(got)-1] != "api.allowed.test:443 Basic dXNlcjpwQHNz" {
		t.Fatalf("the proxy was asked for %q, want api.allowed.test:443 with user:p@ss", got)
	}
	// NO_PROXY: straight there.
	before := len(w.proxied())
	c, err = connect(t, e, "198.18.0.11:443")
	if err != nil {
		t.Fatal(err)
	}
	if body, err := w.httpsGet(c, "other.allowed.test"); err != nil || body != "host=other.allowed.test" {
		t.Fatalf("NO_PROXY: %q, %v", body, err)
	}
	if len(w.proxied()) != before {
		t.Fatalf("a NO_PROXY name went through the proxy: %v", w.proxied()[before:])
	}
	// A proxy that refuses: a RST inside.
	env["HTTPS_PROXY"] = "http://wrong:creds@198.18.0.30:3128"
	d, _ = NewHostDialer(func(k string) string { return env[k] })
	e, _ = w.newEngine(t, filtered("*.allowed.test"), Options{Dialer: d})
	query(t, e, "api.allowed.test", dns.TypeA, false)
	if _, err := connect(t, e, "198.18.0.10:443"); err != errRejected {
		t.Fatalf("refused CONNECT: %v", err)
	}
}

func TestNameTableCap(t *testing.T) {
	w := needWorld(t)
	e, ds := w.newEngine(t, filtered("*.allowed.test"), Options{MaxNames: 8})
	for i := range 20 {
		query(t, e, "n"+string(rune('a'+i))+".flood.allowed.test", dns.TypeA, false)
	}
	if n := e.Stats().Names; n != 8 {
		t.Fatalf("table holds %d pairs, cap 8", n)
	}
	// The oldest name is gone: its SNI is no longer one that resolved here.
	c, _ := connect(t, e, "198.18.0.10:443")
	if _, err := w.httpsGet(c, "na.flood.allowed.test"); err == nil {
		t.Fatal("an evicted name still passed")
	}
	if d := ds.last(t); d.Kind != KindSNI {
		t.Fatalf("denial: %+v", d)
	}
	c, _ = connect(t, e, "198.18.0.10:443")
	if body, err := w.httpsGet(c, "nt.flood.allowed.test"); err != nil || body != "host=nt.flood.allowed.test" {
		t.Fatalf("the newest name: %q, %v", body, err)
	}
}

func TestTTLFloorAndExpiry(t *testing.T) {
	w := needWorld(t)
	now := time.Now()
	clock := func() time.Time { return now }
	e, _ := w.newEngine(t, filtered("*.allowed.test"), Options{Now: clock, MinTTL: time.Minute})
	query(t, e, "api.allowed.test", dns.TypeA, false) // TTL 60s
	now = now.Add(50 * time.Second)
	if _, err := connect(t, e, "198.18.0.10:80"); err != nil {
		t.Fatalf("within the TTL: %v", err)
	}
	now = now.Add(20 * time.Second)
	if _, err := connect(t, e, "198.18.0.10:80"); err != errRejected {
		t.Fatalf("after the TTL: %v", err)
	}
}

func TestDNSTruncationAndTCPRetry(t *testing.T) {
	w := needWorld(t)
	e, _ := w.newEngine(t, filtered("*.allowed.test"), Options{})
	// The upstream truncates over UDP at 1232 bytes; the engine asks again
	// over TCP; a client with a 4096-byte EDNS buffer gets everything.
	r := query(t, e, "big.allowed.test", dns.TypeTXT, true)
	if len(r.Answer) != 40 || r.Truncated {
		t.Fatalf("big TXT with EDNS: %d records, truncated %v", len(r.Answer), r.Truncated)
	}
	// Without EDNS: 512 bytes, TC set, so that the client asks over TCP.
	r = query(t, e, "big.allowed.test", dns.TypeTXT, false)
	if !r.Truncated {
		t.Fatalf("big TXT without EDNS: %d records and no TC", len(r.Answer))
	}
	// The client's retry over TCP (netstack.DNSOverTCP): everything, no TC.
	m := new(dns.Msg).SetQuestion("big.allowed.test.", dns.TypeTXT)
	b, _ := m.Pack()
	out, err := e.DNS(netstack.WithDNSOverTCP(context.Background()), sandboxSrc, b)
	if err != nil || r.Unpack(out) != nil || len(r.Answer) != 40 || r.Truncated {
		t.Fatalf("big TXT over TCP without EDNS: %v, %d records, truncated %v", err, len(r.Answer), r.Truncated)
	}
	// No upstream answering: SERVFAIL, soon.
	e2, _ := w.newEngine(t, filtered("*.allowed.test"), Options{Resolvers: []netip.AddrPort{netip.MustParseAddrPort("198.18.0.53:5999")}, DNSTimeout: 500 * time.Millisecond})
	if r := query(t, e2, "api.allowed.test", dns.TypeA, false); r.Rcode != dns.RcodeServerFailure {
		t.Fatalf("no upstream: %s", dns.RcodeToString[r.Rcode])
	}
}

func TestCloseEndsConnections(t *testing.T) {
	w := needWorld(t)
	e, _ := w.newEngine(t, full(), Options{})
	c, err := connect(t, e, "198.18.0.10:22")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	c.Read(buf)
	if s := e.Stats(); s.Conns != 1 {
		t.Fatalf("conns: %d", s.Conns)
	}
	e.Close()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Read(buf); err == nil {
		t.Fatal("the connection outlived Close")
	}
	if _, err := connect(t, e, "198.18.0.10:22"); err != errRejected {
		t.Fatalf("after Close: %v", err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for e.Stats().Conns != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := e.Stats().Conns; n != 0 {
		t.Fatalf("%d connections left after Close", n)
	}
}

func TestModeNoneRefusesEverything(t *testing.T) {
	w := needWorld(t)
	e, _ := w.newEngine(t, sandbox.Network{Mode: sandbox.NetworkNone}, Options{})
	if r := query(t, e, "api.allowed.test", dns.TypeA, false); r.Rcode != dns.RcodeNameError {
		t.Fatalf("DNS: %s", dns.RcodeToString[r.Rcode])
	}
	if _, err := connect(t, e, "198.18.0.10:80"); err != errRejected {
		t.Fatalf("TCP: %v", err)
	}
}

func TestBulkBothWays(t *testing.T) {
	w := needWorld(t)
	e, _ := w.newEngine(t, filtered("*.allowed.test"), Options{})
	query(t, e, "api.allowed.test", dns.TypeA, false)
	c, err := connect(t, e, "198.18.0.10:22")
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	payload := make([]byte, 8<<20)
	for i := range payload {
		payload[i] = byte(i*7 + i>>11)
	}
	go func() {
		c.Write(payload)
		c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte("SSH-2.0-test\r\n"), payload...)
	if !bytes.Equal(got, want) {
		t.Fatalf("echo of %d bytes came back as %d bytes, equal prefix %d", len(want), len(got), commonPrefix(got, want))
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestOnDenyOncePerTarget(t *testing.T) {
	w := needWorld(t)
	e, ds := w.newEngine(t, filtered("*.allowed.test"), Options{})
	for range 100 {
		query(t, e, "blocked.test", dns.TypeA, false)
	}
	query(t, e, "blocked2.test", dns.TypeA, false)
	if n := len(ds.all()); n != 2 {
		t.Fatalf("OnDeny called %d times for 2 distinct refusals", n)
	}
	if s := e.Stats(); s.Denied[KindDNS] != 101 {
		t.Fatalf("stats: %+v", s)
	}
	if sum := e.Summary(); !strings.Contains(sum, "blocked.test (100x)") {
		t.Fatalf("summary: %q", sum)
	}
}

func TestMaxConns(t *testing.T) {
	w := needWorld(t)
	e, ds := w.newEngine(t, full(), Options{MaxConns: 2})
	for range 2 {
		if _, err := connect(t, e, "198.18.0.10:22"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := connect(t, e, "198.18.0.10:22"); err != errRejected {
		t.Fatalf("a connection over MaxConns: %v", err)
	}
	if d := ds.last(t); !strings.Contains(d.Reason, "connections at once") {
		t.Fatalf("denial: %+v", d)
	}
}

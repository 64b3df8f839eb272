package netpolicy

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// clientHello is what crypto/tls sends as a client for serverName.
func clientHello(t testing.TB, serverName string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		tls.Client(a, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}).Handshake()
	}()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := b.Read(buf)
		out = append(out, buf[:n]...)
		if v, _ := sniffTLS(out); v != needMore || err != nil {
			b.Close()
			return out
		}
	}
}

func TestSniffTLS(t *testing.T) {
	hello := clientHello(t, "Api.Example.COM")
	for i := 1; i < len(hello); i++ {
		if v, _, _ := sniff(hello[:i]); v != needMore {
			t.Fatalf("after %d of %d bytes: verdict %d, want needMore", i, len(hello), v)
		}
	}
	v, kind, names := sniff(hello)
	if v != named || kind != KindSNI || len(names) != 1 || names[0] != "api.example.com" {
		t.Fatalf("sniff: %d %s %v", v, kind, names)
	}
	// The same ClientHello cut into records of 7 bytes.
	body := hello[5:]
	var frag []byte
	for len(body) > 0 {
		n := min(7, len(body))
		frag = append(frag, 0x16, 3, 1, 0, byte(n))
		frag = append(frag, body[:n]...)
		body = body[n:]
	}
	if v, _, names := sniff(frag); v != named || len(names) != 1 || names[0] != "api.example.com" {
		t.Fatalf("fragmented: %d %v", v, names)
	}
	// Without SNI (an IP address as the server name).
	if v, _, names := sniff(clientHello(t, "198.18.0.1")); v != named || len(names) != 0 {
		t.Fatalf("no SNI: %d %v", v, names)
	}
	// A byte no host name has: refused.
	evil := bytes.Replace(hello, []byte("Api.Example.COM"), []byte("Api.Example.CO\x00"), 1)
	if v, _, _ := sniff(evil); v != malformed {
		t.Fatalf("a NUL in the SNI: verdict %d", v)
	}
}

func TestSniffHTTP(t *testing.T) {
	for _, tt := range []struct {
		in    string
		v     verdict
		names []string
	}{
		{"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", named, []string{"a.test"}},
		{"GET / HTTP/1.1\r\nhOsT:A.Test.:8080\r\n\r\n", named, []string{"a.test"}},
		{"GET / HTTP/1.1\nHost: [2001:db8::1]:80\n\n", named, []string{"2001:db8::1"}},
		{"GET http://b.test:81/x HTTP/1.1\r\nHost: a.test\r\n\r\n", named, []string{"b.test", "a.test"}},
		{"GET / HTTP/1.0\r\n\r\n", named, nil},
		{"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", malformed, nil},
		{"GET / HTTP/1.1\r\nHost : a.test\r\n\r\n", malformed, nil},
		{"GET / HTTP/1.1\r\nX: y\r\n Host: b.test\r\n\r\n", malformed, nil},
		{"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", malformed, nil},
		{"GET / HTTP/1.1\r\nHost: a.test\r\n", needMore, nil},
		{"GET / HTTP/1.1\r\nHo", needMore, nil},
		{"GE", needMore, nil},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", opaque, nil},
		{"SSH-2.0-OpenSSH\r\n", opaque, nil},
		{"\x00\x01binary", opaque, nil},
		{"GET / HTTP/9.9\r\n\r\n", malformed, nil},
		{"get / HTTP/1.1\r\nHost: b.test\r\n\r\n", named, []string{"b.test"}},
		{"\r\n\r\nGET / HTTP/1.1\r\nHost: b.test\r\n\r\n", named, []string{"b.test"}},
		{"\r\n", needMore, nil},
		{"GET  / HTTP/1.1\r\nHost: b.test\r\n\r\n", malformed, nil},
		{"GET\t/ HTTP/1.1\r\nHost: b.test\r\n\r\n", malformed, nil},
		{"GET /\r\n", opaque, nil},
	} {
		v, _, names := sniff([]byte(tt.in))
		if v != tt.v || strings.Join(names, ",") != strings.Join(tt.names, ",") {
			t.Errorf("sniff(%q) = %d %v, want %d %v", tt.in, v, names, tt.v, tt.names)
		}
	}
}

func FuzzSniff(f *testing.F) {
	f.Add(clientHello(f, "a.example.com"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, _, names := sniff(b)
		for _, n := range names {
			if _, err := netip.ParseAddr(n); err == nil {
				continue
			}
			if m, ok := normalName(n); !ok || m != n {
				t.Fatalf("sniff returned a name that is not normal: %q", n)
			}
		}
		if v != named && len(names) > 0 {
			t.Fatalf("names %v with verdict %d", names, v)
		}
		// More bytes never make a complete verdict incomplete.
		if v == named || v == opaque {
			if w, _, _ := sniff(append(b[:len(b):len(b)], "trailing"...)); w != v && !(v == opaque) {
				t.Fatalf("verdict changed with trailing bytes: %d -> %d", v, w)
			}
		}
	})
}

// fuzzEngine resolves *.allowed.test through a resolver that is not
// there, so that fuzzing never leaves the machine.
func fuzzEngine(t testing.TB) *Engine {
	e, err := Compile(sandbox.Network{Mode: sandbox.NetworkFiltered, AllowDomains: []string{"*.allowed.test"}}, Options{
		Resolvers:  []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:9")},
		HostAddrs:  []netip.Addr{},
		DNSTimeout: 20 * time.Millisecond,
		Dialer:     &HostDialer{},
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func FuzzDNS(f *testing.F) {
	for _, q := range []struct {
		name string
		t    uint16
	}{{"a.allowed.test.", dns.TypeA}, {"blocked.test.", dns.TypeAAAA}, {".", dns.TypeNS}, {"x.allowed.test.", dns.TypeANY}} {
		m := new(dns.Msg).SetQuestion(q.name, q.t)
		m.SetEdns0(1232, true)
		b, _ := m.Pack()
		f.Add(b)
	}
	f.Add([]byte{0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0})
	e := fuzzEngine(f)
	f.Fuzz(func(t *testing.T, q []byte) {
		out, err := e.DNS(context.Background(), sandboxSrcUnit, q)
		if err != nil {
			if len(q) >= 12 && q[2]&0x80 == 0 {
				t.Fatalf("no answer to a query: %v", err)
			}
			return
		}
		if len(out) < 12 || out[0] != q[0] || out[1] != q[1] || out[2]&0x80 == 0 {
			t.Fatalf("answer %x to %x", out, q)
		}
		if len(out) > 65535 {
			t.Fatalf("answer of %d bytes", len(out))
		}
		// The answer never holds more than the client can take over UDP.
		r := new(dns.Msg)
		if err := r.Unpack(out); err == nil {
			size := 512
			req := new(dns.Msg)
			if req.Unpack(q) == nil {
				if opt := req.IsEdns0(); opt != nil {
					size = max(int(opt.UDPSize()), 512)
				}
			}
			if len(out) > size {
				t.Fatalf("answer of %d bytes for a client that takes %d", len(out), size)
			}
		}
	})
}

var sandboxSrcUnit = netip.MustParseAddrPort("10.0.2.100:40001")

func TestDNSNotAQuery(t *testing.T) {
	e := fuzzEngine(t)
	for _, q := range [][]byte{nil, {1, 2, 3}, {0, 1, 0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0}} {
		if out, err := e.DNS(context.Background(), sandboxSrcUnit, q); err == nil {
			t.Errorf("DNS(%x) = %x, want no answer", q, out)
		}
	}
	// Names that are not host names never go upstream.
	for _, name := range []string{`evil\.x.allowed.test.`, "a b.allowed.test.", "a\\000.allowed.test."} {
		m := new(dns.Msg).SetQuestion(name, dns.TypeA)
		b, err := m.Pack()
		if err != nil {
			continue
		}
		out, _ := e.DNS(context.Background(), sandboxSrcUnit, b)
		r := new(dns.Msg)
		if r.Unpack(out) != nil || r.Rcode != dns.RcodeNameError {
			t.Errorf("%q: %v", name, r)
		}
	}
}

func TestClassify(t *testing.T) {
	ef, err := Compile(sandbox.Network{Mode: sandbox.NetworkFiltered, AllowDomains: []string{"x.test"}}, Options{Resolvers: []netip.AddrPort{}, HostAddrs: []netip.Addr{netip.MustParseAddr("203.0.113.7")}, Dialer: &HostDialer{}})
	if err != nil {
		t.Fatal(err)
	}
	eu, err := Compile(sandbox.Network{Mode: sandbox.NetworkFull}, Options{Resolvers: []netip.AddrPort{}, HostAddrs: []netip.Addr{netip.MustParseAddr("203.0.113.7")}, Dialer: &HostDialer{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		addr           string
		filtered, full string
	}{
		{"169.254.169.254", reasonMetadata, reasonMetadata},
		{"::ffff:169.254.169.254", reasonMetadata, reasonMetadata},
		{"64:ff9b::a9fe:a9fe", reasonMetadata, reasonMetadata},
		{"fd00:ec2::254", reasonMetadata, reasonMetadata},
		{"100.100.100.200", reasonMetadata, reasonMetadata},
		{"127.0.0.53", reasonLoopback, reasonLoopback},
		{"::1", reasonLoopback, reasonLoopback},
		{"0.0.0.0", reasonUnspecified, reasonUnspecified},
		{"fe80::1%eth0", reasonLinkLocal, reasonLinkLocal},
		{"239.1.1.1", reasonMulticast, reasonMulticast},
		{"ff02::1", reasonMulticast, reasonMulticast},
		{"255.255.255.255", reasonReserved, reasonReserved},
		{"203.0.113.7", reasonHost, reasonHost},
		{"::ffff:203.0.113.7", reasonHost, reasonHost},
		{"10.0.0.1", reasonPrivate, ""},
		{"172.31.255.255", reasonPrivate, ""},
		{"192.168.1.1", reasonPrivate, ""},
		{"100.64.0.1", reasonPrivate, ""},
		{"fd12::1", reasonPrivate, ""},
		{"64:ff9b::a00:1", reasonPrivate, ""},
		{"198.18.0.1", "", ""},
		{"198.19.255.255", "", ""},
		{"2001:2::1", "", ""},
		{"8.8.8.8", "", ""},
		{"10.0.2.2", reasonSandboxNet, reasonSandboxNet},
		{"fd00::3", reasonSandboxNet, reasonSandboxNet},
		{"172.32.0.1", "", ""},
	} {
		a := netip.MustParseAddr(tt.addr)
		if got := ef.refused(a); got != tt.filtered {
			t.Errorf("filtered %s: %q, want %q", tt.addr, got, tt.filtered)
		}
		if got := eu.refused(a); got != tt.full {
			t.Errorf("full %s: %q, want %q", tt.addr, got, tt.full)
		}
	}
}

func TestCompileRefusesBadPolicies(t *testing.T) {
	o := Options{Resolvers: []netip.AddrPort{}, HostAddrs: []netip.Addr{}, Dialer: &HostDialer{}}
	for _, tt := range []struct {
		n    sandbox.Network
		want string
	}{
		{sandbox.Network{}, "mode is not set"},
		{sandbox.Network{Mode: "open"}, "unknown mode"},
		{sandbox.Network{Mode: sandbox.NetworkFiltered, AllowDomains: []string{"*.*"}}, "allowed domain"},
		{sandbox.Network{Mode: sandbox.NetworkFiltered, AllowDomains: []string{"a\r\nb"}}, "allowed domain"},
		{sandbox.Network{Mode: sandbox.NetworkFull, BlockDomains: []string{""}}, "blocked domain"},
		{sandbox.Network{Mode: sandbox.NetworkFull, AllowCIDRs: []string{"10.0.0.0/33"}}, "allowed CIDR"},
		{sandbox.Network{Mode: sandbox.NetworkFull, AllowUDP: []string{"1.2.3.4"}}, "UDP"},
		{sandbox.Network{Mode: sandbox.NetworkFull, AllowUDP: []string{"1.2.3.4:0"}}, "UDP"},
		{sandbox.Network{Mode: sandbox.NetworkFull, AllowDomains: make([]string, maxListEntries+1)}, "entries"},
	} {
		_, err := Compile(tt.n, o)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Compile(%+v): %v, want an error with %q", tt.n, err, tt.want)
		}
	}
}

func TestProxyEnvironment(t *testing.T) {
	env := map[string]string{
		"HTTPS_PROXY": "http://upper:3128",
		"https_proxy": "lower:3128",
		"HTTP_PROXY":  "http://plain:8080",
		"NO_PROXY":    "*.corp.test, .internal.test,exact.test,10.0.0.0/8,192.0.2.1,special.test:8443",
	}
	d, err := NewHostDialer(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, addr, want string
	}{
		{"api.example.com", "198.18.0.1:443", "lower:3128"},
		{"", "198.18.0.1:22", "lower:3128"},
		{"api.example.com", "198.18.0.1:80", "plain:8080"},
		{"a.corp.test", "198.18.0.1:443", ""},
		{"corp.test", "198.18.0.1:443", "lower:3128"},
		{"x.internal.test", "198.18.0.1:443", ""},
		{"exact.test", "198.18.0.1:443", ""},
		{"sub.exact.test", "198.18.0.1:443", ""},
		{"", "10.2.3.4:443", ""},
		{"", "[::ffff:10.2.3.4]:443", ""},
		{"", "192.0.2.1:443", ""},
		{"special.test", "198.18.0.1:8443", ""},
		{"special.test", "198.18.0.1:443", "lower:3128"},
	} {
		got := ""
		if u := d.Proxy(tt.name, netip.MustParseAddrPort(tt.addr)); u != nil {
			got = u.Host
		}
		if got != tt.want {
			t.Errorf("Proxy(%q, %s) = %q, want %q", tt.name, tt.addr, got, tt.want)
		}
	}
	env = map[string]string{"ALL_PROXY": "http://all:1", "no_proxy": "*"}
	d, _ = NewHostDialer(func(k string) string { return env[k] })
	if u := d.Proxy("a.test", netip.MustParseAddrPort("198.18.0.1:443")); u != nil {
		t.Errorf("NO_PROXY=*: %v", u)
	}
	for _, bad := range []string{"socks5://h:1", "http://", "https://proxy:443"} {
		_, err := NewHostDialer(func(k string) string {
			if k == "HTTPS_PROXY" {
				return bad
			}
			return ""
		})
		if err == nil {
			t.Errorf("HTTPS_PROXY=%q accepted", bad)
		}
	}
	_, err = NewHostDialer(func(k string) string {
		if k == "HTTPS_PROXY" {
			return "socks5://user:secret@h:1"
		}
		return ""
	})
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("error shows the password or is missing: %v", err)
	}
}

func TestResolvConf(t *testing.T) {
	got := parseResolvConf([]byte("# c\nnameserver 192.0.2.53 # x\nnameserver ::ffff:192.0.2.54\nnameserver bogus\noptions ndots:5\nnameserver fe80::1%eth0\n"))
	want := []string{"192.0.2.53:53", "192.0.2.54:53", "[fe80::1%eth0]:53"}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range got {
		if got[i].String() != want[i] {
			t.Errorf("%d: %s, want %s", i, got[i], want[i])
		}
	}
	rs, err := ReadResolvConf("/nonexistent/resolv.conf")
	if err != nil || len(rs) != 2 {
		t.Errorf("missing file: %v %v", rs, err)
	}
}

func TestSummaryBounded(t *testing.T) {
	e := fuzzEngine(t)
	for i := range 1000 {
		e.deny(Denial{Kind: KindDNS, Name: strings.Repeat("a", i%300+1) + ".test", Reason: "r", Allow: "--allow-domain x"})
	}
	if n := len(e.Denials()); n != maxSummary {
		t.Fatalf("%d distinct denials kept", n)
	}
	s := e.Summary()
	if strings.Count(s, ".test") != summaryItems || !strings.Contains(s, "more") || strings.Contains(s, "\n") {
		t.Fatalf("summary: %q", s)
	}
	if e.Stats().Denied[KindDNS] != 1000 {
		t.Fatalf("stats: %+v", e.Stats())
	}
}

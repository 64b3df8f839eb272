package netpolicy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/agentkernel/agentkernel/internal/netstack"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// The test internet: a DNS server at 198.18.0.53 with the zone below,
// HTTP (80) and HTTPS (443) servers on the web addresses that answer with
// the Host they were asked for, a server-speaks-first service on
// 198.18.0.10:22, a UDP echo on 198.18.0.10:5353, an HTTP server on the
// namespace's 127.0.0.1 (the host's loopback, as the engine sees it) and a
// CONNECT proxy at 198.18.0.30:3128.
var zone = map[string][]string{
	"api.allowed.test.":         {"A 198.18.0.10", "AAAA 2001:2::10"},
	"other.allowed.test.":       {"A 198.18.0.11"},
	"v6only.allowed.test.":      {"AAAA 2001:2::10"},
	"cdn.allowed.test.":         {"CNAME edge.cdnprovider.test."},
	"edge.cdnprovider.test.":    {"A 198.18.0.12"},
	"tobad.allowed.test.":       {"CNAME evil.blocked.test."},
	"evil.blocked.test.":        {"A 198.18.0.20"},
	"blocked.test.":             {"A 198.18.0.20"},
	"rebind-lo.allowed.test.":   {"A 127.0.0.1"},
	"rebind-md.allowed.test.":   {"A 169.254.169.254"},
	"rebind-priv.allowed.test.": {"A 10.1.2.3", "A 198.18.0.13"},
	"rebind-host.allowed.test.": {"A 198.18.0.99"},
	"mapped.allowed.test.":      {"AAAA ::ffff:169.254.169.254", "AAAA 64:ff9b::a9fe:a9fe"},
	"svc.allowed.test.":         {"HTTPS 1 . alpn=h2 ipv4hint=127.0.0.1"},
	"udp.example.test.":         {"A 198.18.0.10"},
}

var webAddrs = []string{"198.18.0.10", "198.18.0.11", "198.18.0.12", "198.18.0.13", "198.18.0.20", "2001:2::10"}

type world struct {
	resolver netip.AddrPort
	roots    *x509.CertPool
	caPEM    []byte         // the certificate roots trusts, in PEM
	loopback netip.AddrPort // the HTTP server on 127.0.0.1

	mu        sync.Mutex
	connected []string // CONNECT targets the proxy was asked for, with their auth
}

var (
	worldOnce sync.Once
	theWorld  *world
	worldErr  error
)

// needWorld returns the test internet, made once per test binary.
func needWorld(t *testing.T) *world {
	t.Helper()
	if !netnsReady {
		testenv.Missing(t, "no network namespace for the test internet: %v", netnsErr)
	}
	worldOnce.Do(func() { theWorld, worldErr = startWorld() })
	if worldErr != nil {
		t.Fatalf("starting the test internet: %v", worldErr)
	}
	return theWorld
}

func startWorld() (*world, error) {
	w := &world{resolver: netip.MustParseAddrPort("198.18.0.53:53")}
	if err := startDNS(w.resolver.String()); err != nil {
		return nil, err
	}
	cert, roots, err := testCert()
	if err != nil {
		return nil, err
	}
	w.roots = roots
	w.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Leaf.Raw})
	web := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(rw, "host=%s", r.Host)
	})
	for _, a := range webAddrs {
		ln, err := net.Listen("tcp", net.JoinHostPort(a, "80"))
		if err != nil {
			return nil, err
		}
		go serveHTTP(ln, web)
		tln, err := net.Listen("tcp", net.JoinHostPort(a, "443"))
		if err != nil {
			return nil, err
		}
		go serveHTTP(tls.NewListener(tln, &tls.Config{Certificates: []tls.Certificate{cert}}), web)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w.loopback = netip.MustParseAddrPort(ln.Addr().String())
	go serveHTTP(ln, web)

	banner, err := net.Listen("tcp", "198.18.0.10:22")
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := banner.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Write([]byte("SSH-2.0-test\r\n"))
				io.Copy(c, c)
			}()
		}
	}()
	pc, err := net.ListenPacket("udp", "198.18.0.10:5353")
	if err != nil {
		return nil, err
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	pln, err := net.Listen("tcp", "198.18.0.30:3128")
	if err != nil {
		return nil, err
	}
	go w.serveProxy(pln)
	return w, nil
}

// lookupA is the zone's first IPv4 address for name, through CNAMEs.
func lookupA(name string) string {
	for range 8 {
		for _, s := range zone[dns.Fqdn(name)] {
			f := strings.Fields(s)
			switch f[0] {
			case "A":
				return f[1]
			case "CNAME":
				name = f[1]
			}
		}
	}
	return ""
}

func startDNS(addr string) error {
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg).SetReply(r)
		q := r.Question[0]
		name := strings.ToLower(q.Name)
		var rrs []string
		switch {
		case strings.HasSuffix(name, ".flood.allowed.test."):
			rrs = []string{"A 198.18.0.10"}
		case name == "big.allowed.test.":
			for i := range 40 {
				rrs = append(rrs, fmt.Sprintf("TXT \"%02d-%s\"", i, strings.Repeat("x", 60)))
			}
		default:
			rrs = zone[name]
		}
		if rrs == nil {
			m.Rcode = dns.RcodeNameError
		}
		for owner := name; len(rrs) > 0; {
			next := ""
			for _, s := range rrs {
				rr, err := dns.NewRR(owner + " 60 IN " + s)
				if err != nil {
					panic(err)
				}
				if rr.Header().Rrtype == q.Qtype || rr.Header().Rrtype == dns.TypeCNAME {
					m.Answer = append(m.Answer, rr)
				}
				if c, ok := rr.(*dns.CNAME); ok {
					next = c.Target
				}
			}
			if next == "" {
				break
			}
			owner, rrs = next, zone[next]
		}
		if _, udp := w.LocalAddr().(*net.UDPAddr); udp {
			size := dns.MinMsgSize
			if opt := r.IsEdns0(); opt != nil {
				size = int(opt.UDPSize())
			}
			m.Truncate(size)
		}
		w.WriteMsg(m)
	})
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go (&dns.Server{PacketConn: pc, Handler: h}).ActivateAndServe()
	go (&dns.Server{Listener: ln, Handler: h}).ActivateAndServe()
	return nil
}

// testCert is a certificate for the zone's names, and the pool that
// trusts it.
func testCert() (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test internet"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		DNSNames:              []string{"*.allowed.test", "*.flood.allowed.test", "blocked.test", "edge.cdnprovider.test"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: c}, pool, nil
}

// serveProxy is a small HTTP CONNECT proxy that wants user:p@ss and
// records what it was asked for.
func (w *world) serveProxy(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			br := bufio.NewReader(c)
			req, err := http.ReadRequest(br)
			if err != nil || req.Method != http.MethodConnect {
				return
			}
			w.mu.Lock()
			w.connected = append(w.connected, req.Host+" "+req.Header.Get("Proxy-Authorization"))
			w.mu.Unlock()
			if req.Header.Get("Proxy-Authorization") != "Basic dXNlcjpwQHNz" { // user:p@ss
				c.Write([]byte("HTTP/1.1 407 Proxy Authentication Required\r\n\r\n"))
				return
			}
			host, port, _ := net.SplitHostPort(req.Host)
			if _, err := netip.ParseAddr(host); err != nil {
				host = lookupA(host)
			}
			up, err := net.Dial("tcp", net.JoinHostPort(host, port))
			if err != nil {
				c.Write([]byte("HTTP/1.1 502 Bad Gateway\r\n\r\n"))
				return
			}
			defer up.Close()
			c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
			go func() { io.Copy(up, br); up.(*net.TCPConn).CloseWrite() }()
			io.Copy(c, up)
		}()
	}
}

func (w *world) proxied() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.connected...)
}

// newEngine compiles n against the test internet, recording denials.
func (w *world) newEngine(t *testing.T, n sandbox.Network, o Options) (*Engine, *denials) {
	t.Helper()
	ds := &denials{}
	o.OnDeny = ds.add
	if o.Resolvers == nil {
		o.Resolvers = []netip.AddrPort{w.resolver}
	}
	if o.HostAddrs == nil {
		o.HostAddrs = []netip.Addr{netip.MustParseAddr("198.18.0.99")}
	}
	if o.Dialer == nil {
		d, err := NewHostDialer(func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		o.Dialer = d
	}
	o.Dialer = loggingDialer{t, o.Dialer}
	e, err := Compile(n, o)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e, ds
}

type denials struct {
	mu   sync.Mutex
	list []Denial
}

func (d *denials) add(x Denial) {
	d.mu.Lock()
	d.list = append(d.list, x)
	d.mu.Unlock()
}

func (d *denials) all() []Denial {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Denial(nil), d.list...)
}

// last is the latest denial, failing t when there is none.
func (d *denials) last(t *testing.T) Denial {
	t.Helper()
	l := d.all()
	if len(l) == 0 {
		t.Fatal("no denial was reported")
	}
	return l[len(l)-1]
}

var sandboxSrc = netip.MustParseAddrPort("10.0.2.100:40000")

// query asks the engine's resolver, as the sandbox does.
func query(t *testing.T, e *Engine, name string, qtype uint16, edns bool) *dns.Msg {
	t.Helper()
	m := new(dns.Msg).SetQuestion(dns.Fqdn(name), qtype)
	if edns {
		m.SetEdns0(4096, false)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := e.DNS(ctx, sandboxSrc, b)
	if err != nil {
		t.Fatalf("DNS %s: %v", name, err)
	}
	r := new(dns.Msg)
	if err := r.Unpack(out); err != nil {
		t.Fatalf("DNS %s: the answer does not parse: %v", name, err)
	}
	if r.Id != m.Id {
		t.Fatalf("DNS %s: answer id %d, query id %d", name, r.Id, m.Id)
	}
	return r
}

// addrs are the A/AAAA addresses of an answer.
func addrs(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch r := rr.(type) {
		case *dns.A:
			out = append(out, r.A.String())
		case *dns.AAAA:
			out = append(out, r.AAAA.String())
		}
	}
	return out
}

// sockReq is a TCPRequest over a real TCP connection on the namespace's
// loopback: Accept connects the test's "sandbox application" end to the
// engine's end.
type sockReq struct {
	flow     netstack.Flow
	app      chan net.Conn
	rejected chan struct{}
	once     sync.Once
}

func (r *sockReq) Flow() netstack.Flow { return r.flow }

func (r *sockReq) Reject() {
	r.once.Do(func() { close(r.rejected) })
}

func (r *sockReq) Accept() (net.Conn, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	app, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	c, err := ln.Accept()
	if err != nil {
		app.Close()
		return nil, err
	}
	r.app <- app
	return c, nil
}

var errRejected = errors.New("rejected (RST)")

// connect asks the engine for a connection to dst, as the sandbox's SYN
// does: the application's end, or errRejected.
func connect(t *testing.T, e *Engine, dst string) (net.Conn, error) {
	t.Helper()
	r := &sockReq{
		flow:     netstack.Flow{Proto: "tcp", Src: sandboxSrc, Dst: netip.MustParseAddrPort(dst)},
		app:      make(chan net.Conn, 1),
		rejected: make(chan struct{}),
	}
	go e.TCP(r)
	select {
	case c := <-r.app:
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(15 * time.Second))
		return c, nil
	case <-r.rejected:
		return nil, errRejected
	case <-time.After(15 * time.Second):
		t.Fatalf("connect %s: no answer from the engine", dst)
		return nil, nil
	}
}

// httpGet sends a plain HTTP request with host on c and returns the
// body, or the error that ended the exchange.
func httpGet(c net.Conn, host string) (string, error) {
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// httpsGet does TLS with serverName on c, then a request.
func (w *world) httpsGet(c net.Conn, serverName string) (string, error) {
	tc := tls.Client(c, &tls.Config{ServerName: serverName, RootCAs: w.roots})
	if err := tc.Handshake(); err != nil {
		return "", err
	}
	return httpGet(tc, serverName)
}

func filtered(allow ...string) sandbox.Network {
	return sandbox.Network{Mode: sandbox.NetworkFiltered, AllowDomains: allow, BlockDomains: []string{"169.254.169.254", "metadata.google.internal"}}
}

func full(block ...string) sandbox.Network {
	return sandbox.Network{Mode: sandbox.NetworkFull, BlockDomains: append([]string{"169.254.169.254", "metadata.google.internal"}, block...)}
}

// serveHTTP serves h on ln without logging the handshakes that the
// engine cuts off on purpose.
func serveHTTP(ln net.Listener, h http.Handler) {
	(&http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}).Serve(ln)
}

// loggingDialer logs the upstream dials that fail.
type loggingDialer struct {
	t *testing.T
	d Dialer
}

func (l loggingDialer) DialTCP(ctx context.Context, name string, addr netip.AddrPort) (net.Conn, error) {
	start := time.Now()
	c, err := l.d.DialTCP(ctx, name, addr)
	if err != nil {
		l.t.Logf("upstream dial %s (%s) failed after %v: %v", addr, name, time.Since(start).Round(time.Millisecond), err)
	}
	return c, err
}

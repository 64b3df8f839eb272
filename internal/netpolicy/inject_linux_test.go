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
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/miekg/dns"

	"github.com/agentkernel/agentkernel/internal/netstack"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// The secrets of these tests: what must arrive upstream and never come
// back to the sandbox.
const (
	secretA = "sk-test-0123456789abcdef"
	secretB = "key-b-fedcba9876543210"
)

// upCA is a CA of the test's upstream servers, unknown to the sandbox.
type upCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newUpCA(t testing.TB) *upCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "upstream test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return &upCA{cert: c, key: key, pool: pool}
}

// leaf is a server certificate for names, valid from notBefore to
// notAfter.
func (ca *upCA) leaf(t testing.TB, names []string, notBefore, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: c}
}

// upstream is an HTTPS server (HTTP/1.1 and HTTP/2) that records the
// requests it gets.
type upstream struct {
	port string
	mu   sync.Mutex
	reqs []*http.Request
}

func (u *upstream) requests() []*http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.reqs)
}

// startUpstream serves h (nil: an answer naming the protocol) with cert
// on a free port of addr.
func startUpstream(t testing.TB, addr string, cert tls.Certificate, h http.HandlerFunc) *upstream {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{}
	_, u.port, _ = net.SplitHostPort(ln.Addr().String())
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "proto=%d", r.ProtoMajor) }
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u.mu.Lock()
			u.reqs = append(u.reqs, r.Clone(context.Background()))
			u.mu.Unlock()
			h(w, r)
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		ErrorLog:  discardLog(),
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return u
}

// injectSetup is an engine in filtered mode with the sandbox's CA and
// bindings made by bind from the upstream's port.
type injectSetup struct {
	e        *Engine
	ds       *denials
	caPool   *x509.CertPool // what the sandbox trusts
	ca       tls.Certificate
	mu       sync.Mutex
	injected []string
}

func (s *injectSetup) injections() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.injected)
}

func newInjectSetup(t testing.TB, w *world, roots *x509.CertPool, bindings ...Binding) *injectSetup {
	t.Helper()
	ca, caPEM, err := NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	s := &injectSetup{ca: ca, caPool: x509.NewCertPool()}
	if !s.caPool.AppendCertsFromPEM(caPEM) {
		t.Fatal("NewCA's PEM does not parse")
	}
	o := Options{
		Inject:   &Injection{CA: ca, Bindings: bindings, Roots: roots},
		OnInject: func(key, host string) { s.mu.Lock(); s.injected = append(s.injected, key+"@"+host); s.mu.Unlock() },
	}
	s.e, s.ds = w.newEngineTB(t, filtered("*.allowed.test"), o)
	for _, n := range []string{"api.allowed.test", "other.allowed.test"} {
		queryTB(t, s.e, n)
	}
	return s
}

// client is an HTTP client of the sandbox: each connection is a flow
// through the engine to dst, TLS trusting roots.
func (s *injectSetup) client(dst string, roots *x509.CertPool, h2 bool) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialEngine(s.e, dst)
		},
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2: h2,
		DisableKeepAlives: false,
	}
	if !h2 {
		tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}
}

// dialEngine is connect without a testing.T: the application's end of a
// flow to dst, or errRejected.
func dialEngine(e *Engine, dst string) (net.Conn, error) {
	r := &sockReq{
		flow:     flowTo(dst),
		app:      make(chan net.Conn, 1),
		rejected: make(chan struct{}),
	}
	go e.TCP(r)
	select {
	case c := <-r.app:
		return c, nil
	case <-r.rejected:
		return nil, errRejected
	case <-time.After(15 * time.Second):
		return nil, errors.New("no answer from the engine")
	}
}

func TestInjectHeaderHTTP1AndHTTP2(t *testing.T) {
	w := needWorld(t)
	ca := newUpCA(t)
	echo := func(rw http.ResponseWriter, r *http.Request) {
		// An upstream that echoes the request's headers back.
		rw.Header().Set("X-Echo", r.Header.Get("Authorization"))
		rw.Header().Set("Alt-Svc", `h3=":443"`)
		fmt.Fprintf(rw, "proto=%d auth=%s key=%s", r.ProtoMajor, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
	}
	up := startUpstream(t, "198.18.0.10", ca.leaf(t, []string{"api.allowed.test"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour)), echo)
	host := "api.allowed.test:" + up.port
	s := newInjectSetup(t, w, ca.pool,
		Binding{Key: "KEY_A", Host: "API.Allowed.Test:" + up.port, Value: []byte(secretA)},
		Binding{Key: "KEY_B", Host: host, Header: "x-api-key", Value: []byte(secretB)},
	)
	dst := "198.18.0.10:" + up.port
	for _, h2 := range []bool{false, true} {
		c := s.client(dst, s.caPool, h2)
		for i := range 2 { // two requests on one connection
			req, _ := http.NewRequest("GET", "https://"+host+"/x?i="+strconv.Itoa(i), nil)
			req.Header.Set("Authorization", "Bearer "+DefaultPlaceholder)
			req.Header.Set("X-Api-Key", DefaultPlaceholder)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("h2=%v: %v (denials %v)", h2, err, s.ds.all())
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := 1
			if h2 {
				want = 2
			}
			if resp.StatusCode != 200 || resp.ProtoMajor != want {
				t.Fatalf("h2=%v: %s %s %q", h2, resp.Proto, resp.Status, body)
			}
			// The upstream got the values (and speaks HTTP/2 itself).
			rs := up.requests()
			last := rs[len(rs)-1]
			if got := last.Header.Get("Authorization"); got != "Bearer "+secretA {
				t.Fatalf("h2=%v: Authorization upstream %q", h2, got)
			}
			if got := last.Header.Values("X-Api-Key"); !slices.Equal(got, []string{secretB}) {
				t.Fatalf("h2=%v: X-Api-Key upstream %q", h2, got)
			}
			if last.ProtoMajor != 2 || last.Host != host {
				t.Fatalf("h2=%v: upstream request %s Host %q", h2, last.Proto, last.Host)
			}
			// What came back has the secrets masked.
			for _, v := range []string{string(body), resp.Header.Get("X-Echo")} {
				if strings.Contains(v, secretA) || strings.Contains(v, secretB) {
					t.Fatalf("h2=%v: a secret came back to the sandbox: %q", h2, v)
				}
			}
			if resp.Header.Get("Alt-Svc") != "" {
				t.Fatalf("h2=%v: HTTP/3 offered past the injector", h2)
			}
			if !strings.Contains(string(body), "auth=Bearer "+strings.Repeat("*", len(secretA))) {
				t.Fatalf("h2=%v: body %q", h2, body)
			}
			// The certificate the sandbox saw: minted for the host by the
			// sandbox's CA.
			leaf := resp.TLS.PeerCertificates[0]
			if !slices.Equal(leaf.DNSNames, []string{"api.allowed.test"}) || leaf.IsCA {
				t.Fatalf("leaf: %v IsCA=%v", leaf.DNSNames, leaf.IsCA)
			}
			if err := leaf.CheckSignatureFrom(s.ca.Leaf); err != nil {
				t.Fatalf("leaf not signed by the sandbox CA: %v", err)
			}
			if life := leaf.NotAfter.Sub(time.Now()); life > 25*time.Hour || life < 23*time.Hour {
				t.Fatalf("leaf lives %v", life)
			}
		}
		c.CloseIdleConnections()
	}
	if len(up.requests()) != 4 {
		t.Fatalf("upstream got %d requests", len(up.requests()))
	}
	// An injection is counted once its request's headers are written
	// upstream (httptrace's WroteHeaders), which may come just after the
	// answer reached the client.
	inj := s.injections()
	for deadline := time.Now().Add(5 * time.Second); len(inj) < 8 && time.Now().Before(deadline); inj = s.injections() {
		time.Sleep(10 * time.Millisecond)
	}
	sort.Strings(inj)
	if len(inj) != 8 || inj[0] != "KEY_A@api.allowed.test" || inj[7] != "KEY_B@api.allowed.test" {
		t.Fatalf("OnInject: %v", inj)
	}
	st := s.e.Stats()
	if st.Injected != 8 || st.SecretRefused != 0 {
		t.Fatalf("stats: %+v", st)
	}
	if l := s.ds.all(); len(l) != 0 {
		t.Fatalf("denials: %v", l)
	}
	// The CA.
	if !s.ca.Leaf.IsCA || !s.ca.Leaf.MaxPathLenZero || s.ca.Leaf.MaxPathLen != 0 || !strings.Contains(s.ca.Leaf.Subject.CommonName, "agentkernel sandbox test CA") {
		t.Fatalf("CA: %+v", s.ca.Leaf.Subject)
	}
}

func TestInjectStreamsUnbuffered(t *testing.T) {
	w := needWorld(t)
	ca := newUpCA(t)
	var mu sync.Mutex
	var release chan struct{}
	sse := func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		rel := release
		mu.Unlock()
		rw.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(rw, "data: first\n\n")
		rw.(http.Flusher).Flush()
		select {
		case <-rel:
		case <-time.After(10 * time.Second):
		}
		fmt.Fprintf(rw, "data: last\n\n")
	}
	up := startUpstream(t, "198.18.0.10", ca.leaf(t, []string{"api.allowed.test"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour)), sse)
	host := "api.allowed.test:" + up.port
	s := newInjectSetup(t, w, ca.pool, Binding{Key: "K", Host: host, Value: []byte(secretA)})
	for _, h2 := range []bool{false, true} {
		mu.Lock()
		release = make(chan struct{})
		rel := release
		mu.Unlock()
		resp, err := s.client("198.18.0.10:"+up.port, s.caPool, h2).Get("https://" + host + "/events")
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		got := make(chan string, 1)
		go func() { l, _ := br.ReadString('\n'); got <- l }()
		// The first event must arrive while the upstream still holds the
		// last one back.
		select {
		case l := <-got:
			if l != "data: first\n" {
				t.Fatalf("h2=%v: first event %q", h2, l)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("h2=%v: the first event was held back", h2)
		}
		close(rel)
		rest, _ := io.ReadAll(br)
		resp.Body.Close()
		if string(rest) != "\ndata: last\n\n" {
			t.Fatalf("h2=%v: rest %q", h2, rest)
		}
	}
}

func TestInjectUnboundHostEndToEnd(t *testing.T) {
	w := needWorld(t)
	ca := newUpCA(t)
	leaf := ca.leaf(t, []string{"api.allowed.test", "other.allowed.test"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	up := startUpstream(t, "198.18.0.10", leaf, nil)
	other := startUpstream(t, "198.18.0.11", leaf, func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(rw, "auth=%s", r.Header.Get("Authorization"))
	})
	s := newInjectSetup(t, w, ca.pool, Binding{Key: "K", Host: "api.allowed.test:" + up.port, Value: []byte(secretA)})
	// other.allowed.test on the same port number is not bound: the
	// sandbox talks to the upstream itself, with its own certificate.
	c := s.client("198.18.0.11:"+other.port, ca.pool, true)
	req, _ := http.NewRequest("GET", "https://other.allowed.test:"+other.port+"/", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "auth=" || !slices.Equal(resp.TLS.PeerCertificates[0].Raw, leaf.Leaf.Raw) {
		t.Fatalf("unbound host: %q, certificate %v", body, resp.TLS.PeerCertificates[0].Subject)
	}
	if st := s.e.Stats(); st.Injected != 0 {
		t.Fatalf("stats: %+v", st)
	}
	// A server that speaks first on a bound host's port keeps its
	// connection spliced as it is.
	ln, err := net.Listen("tcp", "198.18.0.10:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			x, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer x.Close(); x.Write([]byte("BANNER\n")); io.Copy(x, x) }()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	s2 := newInjectSetup(t, w, ca.pool, Binding{Key: "K", Host: "api.allowed.test:" + port, Value: []byte(secretA)})
	conn, err := dialEngine(s2.e, "198.18.0.10:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	if l, err := br.ReadString('\n'); err != nil || l != "BANNER\n" {
		t.Fatalf("banner: %q, %v", l, err)
	}
	// Once the server has spoken, a ClientHello for the bound host is
	// not intercepted: it goes to the server (which echoes it).
	tc := tls.Client(conn, &tls.Config{ServerName: "api.allowed.test", RootCAs: s2.caPool})
	if err := tc.Handshake(); err == nil {
		t.Fatal("a connection was intercepted after its server had spoken")
	}
	if st := s2.e.Stats(); st.Injected != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestInjectPlaceholderRefused(t *testing.T) {
	w := needWorld(t)
	ca := newUpCA(t)
	up := startUpstream(t, "198.18.0.10", ca.leaf(t, []string{"api.allowed.test"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour)), nil)
	host := "api.allowed.test:" + up.port
	s := newInjectSetup(t, w, ca.pool, Binding{Key: "K", Host: host, Value: []byte(secretA)})
	c := s.client("198.18.0.10:"+up.port, s.caPool, true)

	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("x:"+DefaultPlaceholder))
	for i, tc := range []struct {
		url, header, value string
		status             int
	}{
		{"/", "X-Other", "token " + DefaultPlaceholder, 403},
		{"/", "Cookie", "k=" + DefaultPlaceholder, 403},
		{"/?key=" + DefaultPlaceholder, "", "", 403},
		{"/?key=ak%2Dproxy%2Dmanaged", "", "", 403},
		{"/", "Authorization", basic, 200}, // the bound header: replaced
		{"/", "X-Forwarded-Auth", basic, 403},
	} {
		req, _ := http.NewRequest("GET", "https://"+host+tc.url, nil)
		if tc.header != "" {
			req.Header.Set(tc.header, tc.value)
		}
		before := len(up.requests())
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Fatalf("case %d: %s %q", i, resp.Status, body)
		}
		if tc.status == 403 {
			if len(up.requests()) != before {
				t.Fatalf("case %d: the refused request reached the upstream", i)
			}
			if d := s.ds.last(t); d.Kind != KindSecret || d.Name != "api.allowed.test" || !strings.Contains(d.Reason, "placeholder") {
				t.Fatalf("case %d: denial %+v", i, d)
			}
		}
	}
	// A request for another host on the intercepted connection.
	req, _ := http.NewRequest("GET", "https://"+host+"/", nil)
	req.Host = "other.allowed.test:" + up.port
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("another Host: %s", resp.Status)
	}
	if d := s.ds.last(t); d.Kind != KindSecret || !strings.Contains(d.Reason, "another host") {
		t.Fatalf("denial: %+v", d)
	}

	// Plain HTTP to an unbound host with the placeholder: refused before
	// anything goes upstream.
	before := s.e.Stats().SecretRefused
	conn, err := dialEngine(s.e, "198.18.0.11:80")
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: other.allowed.test\r\nX-Token: %s\r\n\r\n", DefaultPlaceholder)
	if n, _ := conn.Read(make([]byte, 100)); n != 0 {
		t.Fatal("a plain HTTP request with the placeholder got an answer")
	}
	conn.Close()
	if d := s.ds.last(t); d.Kind != KindSecret || d.Name != "other.allowed.test" || d.Reason != "request carries a secret placeholder for another host" {
		t.Fatalf("denial: %+v", d)
	}
	// Without it the same request goes through.
	conn, _ = dialEngine(s.e, "198.18.0.11:80")
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if body, err := httpGet(conn, "other.allowed.test"); err != nil || body != "host=other.allowed.test" {
		t.Fatalf("plain HTTP without the placeholder: %q, %v", body, err)
	}
	conn.Close()
	st := s.e.Stats()
	if st.SecretRefused != before+1 || st.Injected != 1 {
		t.Fatalf("stats: %+v", st)
	}
	// No value in any refusal or the summary.
	for _, d := range s.ds.all() {
		if strings.Contains(d.String(), secretA) {
			t.Fatalf("the value in a denial: %v", d)
		}
	}
	if sum := s.e.Summary(); strings.Contains(sum, secretA) || !strings.Contains(sum, "api.allowed.test") {
		t.Fatalf("summary: %q", sum)
	}
}

func TestInjectUpstreamCertificateRefused(t *testing.T) {
	w := needWorld(t)
	ca := newUpCA(t)
	other := newUpCA(t)
	now := time.Now()
	for _, tc := range []struct {
		name string
		cert tls.Certificate
		why  string
	}{
		{"wrong name", ca.leaf(t, []string{"elsewhere.test"}, now.Add(-time.Hour), now.Add(time.Hour)), "not api.allowed.test"},
		{"expired", ca.leaf(t, []string{"api.allowed.test"}, now.Add(-48*time.Hour), now.Add(-24*time.Hour)), "expired"},
		{"unknown CA", other.leaf(t, []string{"api.allowed.test"}, now.Add(-time.Hour), now.Add(time.Hour)), "unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startUpstream(t, "198.18.0.10", tc.cert, nil)
			host := "api.allowed.test:" + up.port
			s := newInjectSetup(t, w, ca.pool, Binding{Key: "K", Host: host, Value: []byte(secretA)})
			resp, err := s.client("198.18.0.10:"+up.port, s.caPool, true).Get("https://" + host + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), tc.why) || strings.Contains(string(body), secretA) {
				t.Fatalf("%s %q", resp.Status, body)
			}
			if n := len(up.requests()); n != 0 {
				t.Fatalf("the upstream got %d requests", n)
			}
			d := s.ds.last(t)
			if d.Kind != KindSecret || !strings.HasPrefix(d.Reason, "upstream certificate: ") || !strings.Contains(d.Reason, tc.why) {
				t.Fatalf("denial: %+v", d)
			}
			if st := s.e.Stats(); st.Injected != 0 || st.SecretRefused != 1 || len(s.injections()) != 0 {
				t.Fatalf("stats: %+v", st)
			}
		})
	}
}

func TestInjectBadInjection(t *testing.T) {
	w := needWorld(t)
	ca, _, err := NewCA("x")
	if err != nil {
		t.Fatal(err)
	}
	const v = "s3cr3t-value-123"
	for _, tc := range []struct {
		inj  Injection
		want string
	}{
		{Injection{CA: ca}, "no bindings"},
		{Injection{CA: ca, Bindings: []Binding{{Key: "a b", Host: "x.test", Value: []byte(v)}}}, "binding 1: the key"},
		{Injection{CA: ca, Bindings: []Binding{{Key: "K", Host: "*.x.test", Value: []byte(v)}}}, "not a host name"},
		{Injection{CA: ca, Bindings: []Binding{{Key: "K", Host: "1.2.3.4", Value: []byte(v)}}}, "IP address"},
		{Injection{CA: ca, Bindings: []Binding{{Key: "K", Host: "x.test:0", Value: []byte(v)}}}, "bad port"},
		{Injection{CA: ca, Bindings: []Binding{{Key: "K", Host: "x.test", Header: "Host", Value: []byte(v)}}}, "cannot carry"},
		{Injection{CA: ca, Bindings: []Binding{{Key: "K", Host: "x.test", Header: "X:Y", Value: []byte(v)}}}, "not a header name"},
		{Injection{CA: ca, Bindings: []Binding{{Key: "K", Host: "x.test", Value: []byte(v + "\r\nX-Evil: 1")}}}, "control character"},
		{Injection{CA: ca, Bindings: []Binding{{Key: "K", Host: "x.test"}}}, "empty"},
		{Injection{CA: ca, Bindings: []Binding{{Key: "K", Host: "x.test", Value: []byte(v)}, {Key: "L", Host: "X.test:443", Value: []byte(v)}}}, "both bound"},
		{Injection{CA: ca, Placeholder: "x", Bindings: []Binding{{Key: "K", Host: "x.test", Value: []byte(v)}}}, "placeholder"},
		{Injection{CA: tls.Certificate{Certificate: ca.Certificate}, Bindings: []Binding{{Key: "K", Host: "x.test", Value: []byte(v)}}}, "private key"},
		{Injection{CA: w.leafAsCA(t), Bindings: []Binding{{Key: "K", Host: "x.test", Value: []byte(v)}}}, "CA"},
	} {
		_, err := Compile(filtered("*.allowed.test"), Options{Resolvers: []netip.AddrPort{w.resolver}, Inject: &tc.inj})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), v) || strings.Contains(err.Error(), "X-Evil") {
			t.Errorf("%+v: %v, want an error with %q and no value", tc.inj.Bindings, err, tc.want)
		}
	}
	// Name constraints: a CA for some hosts cannot vouch for others.
	nc, _, err := NewCA("nc", "api.allowed.test")
	if err != nil {
		t.Fatal(err)
	}
	if !nc.Leaf.PermittedDNSDomainsCritical || !slices.Equal(nc.Leaf.PermittedDNSDomains, []string{"api.allowed.test"}) {
		t.Fatalf("name constraints: %v", nc.Leaf.PermittedDNSDomains)
	}
	_, err = Compile(filtered("*.allowed.test"), Options{Resolvers: []netip.AddrPort{w.resolver}, Inject: &Injection{CA: nc, Bindings: []Binding{{Key: "K", Host: "other.allowed.test", Value: []byte(v)}}}})
	if err == nil || !strings.Contains(err.Error(), "constrained") {
		t.Errorf("a binding outside the CA's names: %v", err)
	}
	iss, err := newIssuer(nc, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(nc.Leaf)
	for name, ok := range map[string]bool{"api.allowed.test": true, "evil.test": false} {
		l, err := iss.leaf(name)
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name})
		if (err == nil) != ok {
			t.Errorf("leaf for %s under a constrained CA: %v", name, err)
		}
	}
}

// leafAsCA is a certificate that is not a CA, with its key.
func (w *world) leafAsCA(t *testing.T) tls.Certificate {
	ca := newUpCA(t)
	return ca.leaf(t, []string{"x.test"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
}

// BenchmarkInject times a request through the injector against the same
// request through the engine without injection (both over kept-alive
// HTTP/1.1 connections, HTTPS to the same upstream), and reports the
// added latency (median and 99th percentile) and the requests per second
// through each with 32 clients.
func BenchmarkInject(b *testing.B) {
	if !netnsReady {
		b.Skip("no network namespace")
	}
	worldOnce.Do(func() { theWorld, worldErr = startWorld() })
	if worldErr != nil {
		b.Fatal(worldErr)
	}
	w := theWorld
	ca := newUpCA(b)
	up := startUpstream(b, "198.18.0.10", ca.leaf(b, []string{"api.allowed.test"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour)),
		func(rw http.ResponseWriter, r *http.Request) { io.WriteString(rw, "ok") })
	host := "api.allowed.test:" + up.port
	dst := "198.18.0.10:" + up.port
	s := newInjectSetup(b, w, ca.pool, Binding{Key: "K", Host: host, Value: []byte(secretA)})
	direct, _ := w.newEngineTB(b, filtered("*.allowed.test"), Options{})
	queryTB(b, direct, "api.allowed.test")
	plain := &injectSetup{e: direct}

	get := func(c *http.Client) error {
		resp, err := c.Get("https://" + host + "/")
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %s", resp.Status)
		}
		return err
	}
	quantiles := func(c *http.Client, n int) (p50, p99 time.Duration) {
		ds := make([]time.Duration, n)
		for i := range ds {
			start := time.Now()
			if err := get(c); err != nil {
				b.Fatal(err)
			}
			ds[i] = time.Since(start)
		}
		slices.Sort(ds)
		return ds[n/2], ds[n*99/100]
	}
	dc := plain.client(dst, ca.pool, false)
	ic := s.client(dst, s.caPool, false)
	for range 20 { // warm: connections, leaf
		get(dc)
		get(ic)
	}
	b.ResetTimer()
	var p50d, p99d, p50i, p99i time.Duration
	for range b.N {
		p50d, p99d = quantiles(dc, 500)
		p50i, p99i = quantiles(ic, 500)
	}
	b.ReportMetric(float64(p50d.Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(p50i.Microseconds()), "inject-p50-µs")
	b.ReportMetric(float64((p50i - p50d).Microseconds()), "added-p50-µs")
	b.ReportMetric(float64((p99i - p99d).Microseconds()), "added-p99-µs")

	rps := func(st *injectSetup, roots *x509.CertPool) float64 {
		const clients, per = 32, 100
		var wg sync.WaitGroup
		start := time.Now()
		errs := make(chan error, clients)
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := st.client(dst, roots, false)
				defer c.CloseIdleConnections()
				for range per {
					if err := get(c); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
		return float64(clients*per) / time.Since(start).Seconds()
	}
	b.ReportMetric(rps(plain, ca.pool), "direct-req/s@32")
	b.ReportMetric(rps(s, s.caPool), "inject-req/s@32")
}

// Helpers that take a testing.TB (the benchmark's too).

func (w *world) newEngineTB(t testing.TB, n sandbox.Network, o Options) (*Engine, *denials) {
	t.Helper()
	ds := &denials{}
	o.OnDeny = ds.add
	o.Resolvers = []netip.AddrPort{w.resolver}
	o.HostAddrs = []netip.Addr{netip.MustParseAddr("198.18.0.99")}
	d, err := NewHostDialer(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	o.Dialer = d
	e, err := Compile(n, o)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e, ds
}

func queryTB(t testing.TB, e *Engine, name string) {
	t.Helper()
	m := new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.TypeA)
	q, _ := m.Pack()
	out, err := e.DNS(context.Background(), sandboxSrc, q)
	if err != nil {
		t.Fatal(err)
	}
	r := new(dns.Msg)
	if err := r.Unpack(out); err != nil || len(r.Answer) == 0 {
		t.Fatalf("DNS %s: %v %v", name, err, r)
	}
}

func flowTo(dst string) netstack.Flow {
	return netstack.Flow{Proto: "tcp", Src: sandboxSrc, Dst: netip.MustParseAddrPort(dst)}
}

func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }

func TestInjectProxyMode(t *testing.T) {
	w := needWorld(t)
	ca := newUpCA(t)
	up := startUpstream(t, "198.18.0.10", ca.leaf(t, []string{"api.allowed.test"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour)),
		func(rw http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(rw, "ok=%v", r.Header.Get("Authorization") == "Bearer "+secretA)
		})
	host := "api.allowed.test:" + up.port
	s := newInjectSetup(t, w, ca.pool, Binding{Key: "K", Host: host, Value: []byte(secretA)})
	addr, _ := startProxy(t, s.e)
	// A CONNECT tunnel to the bound host is intercepted as a TCP flow is.
	tr := &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: addr}),
		TLSClientConfig: &tls.Config{RootCAs: s.caPool},
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 15 * time.Second}
	if code, body, err := get(c, "https://"+host+"/"); err != nil || code != 200 || body != "ok=true" {
		t.Fatalf("through a CONNECT tunnel: %d %q %v (denials %v)", code, body, err, s.ds.all())
	}
	// A plain HTTP request with the placeholder is refused with a 403.
	code, body := rawProxy(t, addr, "GET http://other.allowed.test/ HTTP/1.1\r\nHost: other.allowed.test\r\nAuthorization: Bearer "+DefaultPlaceholder+"\r\n\r\n")
	if code != 403 || !strings.Contains(body, "placeholder") {
		t.Fatalf("plain HTTP with the placeholder: %d %q", code, body)
	}
	if st := s.e.Stats(); st.Injected != 1 || st.SecretRefused != 1 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestRedactorSplitSecrets(t *testing.T) {
	secrets := [][]byte{[]byte(secretA), []byte(secretB)}
	in := "a" + secretA + "b" + secretB + secretA + "\n" + secretA[:5]
	want := strings.NewReplacer(secretA, strings.Repeat("*", len(secretA)), secretB, strings.Repeat("*", len(secretB))).Replace(in)
	for _, name := range []string{"whole", "one byte at a time"} {
		var r io.Reader = strings.NewReader(in)
		if name != "whole" {
			r = iotest.OneByteReader(r)
		}
		d := &redactor{r: io.NopCloser(r), secrets: secrets}
		out, err := io.ReadAll(iotest.OneByteReader(d))
		if err != nil || string(out) != want {
			t.Fatalf("%s: %q, %v; want %q", name, out, err, want)
		}
	}
	// A chunk that ends in a line break is released whole.
	pr, pw := io.Pipe()
	d := &redactor{r: pr, secrets: secrets}
	go pw.Write([]byte("data: x\n\n"))
	buf := make([]byte, 64)
	if n, err := d.Read(buf); err != nil || string(buf[:n]) != "data: x\n\n" {
		t.Fatalf("%q, %v", buf[:n], err)
	}
	pw.Close()
}

// acceptedReq is a TCPRequest for a connection accepted on a real
// listener, so that programs can be the sandbox's clients.
type acceptedReq struct {
	flow netstack.Flow
	c    net.Conn
}

func (r *acceptedReq) Flow() netstack.Flow       { return r.flow }
func (r *acceptedReq) Reject()                   { r.c.Close() }
func (r *acceptedReq) Accept() (net.Conn, error) { return r.c, nil }

// frontEnd listens on the namespace's loopback and hands each connection
// to e as a flow to dst; it returns the listener's port.
func frontEnd(t *testing.T, e *Engine, dst string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go e.TCP(&acceptedReq{flow: flowTo(dst), c: c})
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// TestInjectClients: curl (HTTP/1.1 and HTTP/2, OpenSSL), Python's
// urllib and Node's fetch trust the sandbox's name-constrained CA and
// their requests arrive with the secret.
func TestInjectClients(t *testing.T) {
	w := needWorld(t)
	ca := newUpCA(t)
	up := startUpstream(t, "198.18.0.10", ca.leaf(t, []string{"api.allowed.test"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour)),
		func(rw http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(rw, "proto=%d secret=%v", r.ProtoMajor, r.Header.Get("Authorization") == "Bearer "+secretA)
		})
	host := "api.allowed.test:" + up.port
	sca, caPEM, err := NewCA("clients", "api.allowed.test")
	if err != nil {
		t.Fatal(err)
	}
	e, ds := w.newEngineTB(t, filtered("*.allowed.test"), Options{Inject: &Injection{CA: sca, Roots: ca.pool,
		Bindings: []Binding{{Key: "K", Host: host, Value: []byte(secretA)}}}})
	queryTB(t, e, "api.allowed.test")
	port := frontEnd(t, e, "198.18.0.10:"+up.port)
	caFile := t.TempDir() + "/ca.pem"
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	// The front end's port stands for the upstream's: the URL names the
	// bound host and its port, resolved to the front end.
	url := "https://" + host + "/v1"
	type client struct {
		name string
		args []string
		env  []string
		want string
	}
	connectTo := "api.allowed.test:" + up.port + ":127.0.0.1:" + port
	clients := []client{
		{"curl", []string{"curl", "-sS", "--http1.1", "--cacert", caFile, "--connect-to", connectTo, url}, nil, "proto=2 secret=true"},
		{"curl", []string{"curl", "-sS", "--http2", "--cacert", caFile, "--connect-to", connectTo, "-H", "Authorization: Bearer " + DefaultPlaceholder, url}, nil, "proto=2 secret=true"},
		{"python3", []string{"python3", "-c", `
import http.client, socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[1])
c = http.client.HTTPSConnection("api.allowed.test", int(sys.argv[2]), context=ctx)
c._create_connection = lambda addr, *a, **k: socket.create_connection(("127.0.0.1", int(sys.argv[3])), *a, **k)
c.request("GET", "/v1", headers={"Authorization": "Bearer ak-proxy-managed"})
print(c.getresponse().read().decode(), end="")
`, caFile, up.port, port}, nil, "proto=2 secret=true"},
		{"node", []string{"node", "-e", `
const https = require("https");
https.get({host: "127.0.0.1", port: +process.argv[1], servername: "api.allowed.test", path: "/v1",
  headers: {Host: "api.allowed.test:" + process.argv[2], Authorization: "Bearer ak-proxy-managed"}},
  r => { let b = ""; r.on("data", d => b += d); r.on("end", () => process.stdout.write(b)); })
  .on("error", e => { console.error(e.message); process.exit(1); });
`, port, up.port}, []string{"NODE_EXTRA_CA_CERTS=" + caFile}, "proto=2 secret=true"},
	}
	for _, c := range clients {
		if _, err := exec.LookPath(c.args[0]); err != nil {
			testenv.Missing(t, "%s is not installed", c.args[0])
			continue
		}
		cmd := exec.Command(c.args[0], c.args[1:]...)
		cmd.Env = append(noProxyEnv(), c.env...)
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != c.want {
			t.Errorf("%v: %q, %v (denials %v)", c.args[:2], out, err, ds.all())
		}
	}
	if st := e.Stats(); st.Injected != uint64(len(clients)) {
		t.Errorf("stats: %+v", st)
	}
}

func TestInjectCloseEndsConnections(t *testing.T) {
	w := needWorld(t)
	ca := newUpCA(t)
	up := startUpstream(t, "198.18.0.10", ca.leaf(t, []string{"api.allowed.test"}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour)), nil)
	host := "api.allowed.test:" + up.port
	s := newInjectSetup(t, w, ca.pool, Binding{Key: "K", Host: host, Value: []byte(secretA)})
	conn, err := dialEngine(s.e, "198.18.0.10:"+up.port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tc := tls.Client(conn, &tls.Config{ServerName: "api.allowed.test", RootCAs: s.caPool, NextProtos: []string{"http/1.1"}})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if body, err := io.ReadAll(resp.Body); err != nil || string(body) != "proto=2" {
		t.Fatalf("%q, %v", body, err)
	}
	if n := s.e.Stats().Conns; n != 1 {
		t.Fatalf("conns: %d", n)
	}
	s.e.Close()
	if _, err := tc.Read(make([]byte, 10)); err == nil {
		t.Fatal("the intercepted connection outlived Close")
	}
	deadline := time.Now().Add(3 * time.Second)
	for s.e.Stats().Conns != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.e.Stats().Conns; n != 0 {
		t.Fatalf("%d connections left after Close", n)
	}
}

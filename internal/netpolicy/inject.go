package netpolicy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultPlaceholder is what a bound secret's variable holds inside a
// sandbox (as upstream agentkernel has it).
const DefaultPlaceholder = "ak-proxy-managed"

// KindSecret is the kind of a refusal of the secret injector: a request
// that carries a placeholder where no secret is injected, a request for
// another host on an intercepted connection, an upstream certificate
// refused.
const KindSecret = "secret"

// Limits of an injection.
const (
	maxBindings    = 256
	maxSecretValue = 16 << 10
	minPlaceholder = 8
	// maxUpstreamPerConn bounds the upstream connections one intercepted
	// client connection may open at once (an HTTP/2 client's streams to
	// an HTTP/1 upstream).
	maxUpstreamPerConn = 16
)

// Injection makes the engine terminate TLS for bound hosts and add a
// secret to their requests.
type Injection struct {
	// CA is the sandbox's CA (certificate and private key, from NewCA);
	// the bound hosts' certificates are minted from it.
	CA tls.Certificate
	// Bindings are the secrets and the hosts they are added for.
	Bindings []Binding
	// Roots are the CAs upstream servers are verified against; nil: the
	// host's system roots, read when the engine is compiled.
	Roots *x509.CertPool
	// Placeholder is what a bound secret's variable holds inside the
	// sandbox; "" is DefaultPlaceholder.
	Placeholder string
}

// Binding is one secret for one host.
type Binding struct {
	// Key is the secret's name ([A-Za-z0-9_-]), for the audit log.
	Key string
	// Host is an exact host name (no wildcard), case-insensitive,
	// optionally with ":port" (default 443).
	Host string
	// Header is the header the value goes in, as "Header: value"; ""
	// is "Authorization: Bearer value".
	Header string
	// Value is the secret.
	Value []byte
}

// secretBinding is a compiled Binding.
type secretBinding struct {
	key    string
	host   string // normalised
	port   uint16
	header string // canonical form
	value  string // the header's value
}

// injector is the engine's secret injection.
type injector struct {
	e           *Engine
	issuer      *issuer
	roots       *x509.CertPool
	placeholder []byte
	bound       map[string][]*secretBinding // by "host:port"
	ports       map[uint16]bool
	secrets     [][]byte // the values, for redaction of what comes back
	onInject    func(key, host string)
	tlsConf     *tls.Config

	startOnce sync.Once
	srv       *http.Server
	ln        *connListener
	sessions  sync.Map // *tls.Conn -> *session
}

// compileInjection checks an Injection. Its errors name keys and hosts,
// never a value.
func compileInjection(e *Engine, in *Injection, onInject func(key, host string)) (*injector, error) {
	if len(in.Bindings) == 0 {
		return nil, errors.New("secret injection: no bindings")
	}
	if len(in.Bindings) > maxBindings {
		return nil, fmt.Errorf("secret injection: %d bindings, more than %d", len(in.Bindings), maxBindings)
	}
	iss, err := newIssuer(in.CA, e.now)
	if err != nil {
		return nil, fmt.Errorf("secret injection: %w", err)
	}
	inj := &injector{
		e:        e,
		issuer:   iss,
		roots:    in.Roots,
		bound:    map[string][]*secretBinding{},
		ports:    map[uint16]bool{},
		onInject: onInject,
	}
	ph := in.Placeholder
	if ph == "" {
		ph = DefaultPlaceholder
	}
	if len(ph) < minPlaceholder || len(ph) > 256 || !isToken(ph) {
		return nil, fmt.Errorf("secret injection: the placeholder must be %d to 256 letters, digits or token characters", minPlaceholder)
	}
	inj.placeholder = []byte(ph)
	for i, b := range in.Bindings {
		cb, err := compileBinding(b, inj.placeholder)
		if err != nil {
			what := fmt.Sprintf("binding %d", i+1)
			if validKey(b.Key) {
				what = fmt.Sprintf("secret %s", b.Key)
			}
			return nil, fmt.Errorf("secret injection: %s: %w", what, err)
		}
		if !iss.permits(cb.host) {
			return nil, fmt.Errorf("secret injection: secret %s: the sandbox's CA is constrained to other names than %s (a new CA is needed)", cb.key, cb.host)
		}
		hp := net.JoinHostPort(cb.host, strconv.Itoa(int(cb.port)))
		for _, o := range inj.bound[hp] {
			if o.header == cb.header {
				return nil, fmt.Errorf("secret injection: secrets %s and %s are both bound to header %s of %s", o.key, cb.key, cb.header, hp)
			}
		}
		inj.bound[hp] = append(inj.bound[hp], cb)
		inj.ports[cb.port] = true
		inj.secrets = append(inj.secrets, append([]byte(nil), b.Value...))
	}
	if inj.roots == nil {
		// Read now: the network helper reads nothing once it serves.
		roots, err := x509.SystemCertPool()
		if err != nil {
			return nil, fmt.Errorf("secret injection: the system's root certificates: %w", err)
		}
		inj.roots = roots
	}
	inj.tlsConf = &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			name, ok := normalName(h.ServerName)
			if !ok || !inj.isBoundName(name) {
				return nil, errors.New("no certificate for this name")
			}
			return inj.issuer.leaf(name)
		},
	}
	return inj, nil
}

func compileBinding(b Binding, placeholder []byte) (*secretBinding, error) {
	if !validKey(b.Key) {
		return nil, errors.New("the key must be 1 to 128 of A-Z, a-z, 0-9, '_' and '-'")
	}
	cb := &secretBinding{key: b.Key, port: 443}
	host := b.Host
	if h, p, err := net.SplitHostPort(b.Host); err == nil {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("host %q: bad port", b.Host)
		}
		host, cb.port = h, uint16(n)
	}
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return nil, fmt.Errorf("host %q: an IP address cannot be bound (TLS clients send no server name for one)", b.Host)
	}
	n, ok := normalName(host)
	if !ok {
		return nil, fmt.Errorf("host %q is not a host name (exact names only, no wildcards)", b.Host)
	}
	cb.host = n
	if b.Header == "" {
		cb.header = "Authorization"
	} else {
		if !isToken(b.Header) || len(b.Header) > 128 {
			return nil, fmt.Errorf("header %q is not a header name", b.Header)
		}
		cb.header = http.CanonicalHeaderKey(b.Header)
		if forbiddenHeader[strings.ToLower(cb.header)] {
			return nil, fmt.Errorf("header %s cannot carry a secret (it frames or routes the request)", cb.header)
		}
	}
	if len(b.Value) == 0 {
		return nil, errors.New("the value is empty")
	}
	if len(b.Value) > maxSecretValue {
		return nil, fmt.Errorf("the value is longer than %d bytes", maxSecretValue)
	}
	for _, c := range b.Value {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return nil, errors.New("the value holds a control character (a line break?): it cannot go in a header")
		}
	}
	if b.Value[0] == ' ' || b.Value[0] == '\t' || b.Value[len(b.Value)-1] == ' ' || b.Value[len(b.Value)-1] == '\t' {
		return nil, errors.New("the value starts or ends with white space, which a header cannot keep")
	}
	if bytes.Contains(b.Value, placeholder) {
		return nil, errors.New("the value contains the placeholder")
	}
	if b.Header == "" {
		cb.value = "Bearer " + string(b.Value)
	} else {
		cb.value = string(b.Value)
	}
	return cb, nil
}

// forbiddenHeader are headers a secret cannot be put in.
var forbiddenHeader = map[string]bool{
	"host": true, "connection": true, "content-length": true, "transfer-encoding": true,
	"te": true, "trailer": true, "upgrade": true, "keep-alive": true, "proxy-connection": true,
	"proxy-authorization": true, "proxy-authenticate": true, "content-encoding": true, "expect": true,
}

func validKey(k string) bool {
	if k == "" || len(k) > 128 {
		return false
	}
	for _, c := range []byte(k) {
		if !(isLetter(c) || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !isTokenChar(c) {
			return false
		}
	}
	return true
}

func (inj *injector) isBoundName(name string) bool {
	for _, bs := range inj.bound {
		if bs[0].host == name {
			return true
		}
	}
	return false
}

// bindingsFor are the bindings of a TLS connection to port that presented
// names (its SNI), nil when it is not intercepted.
func (inj *injector) bindingsFor(names []string, port uint16) []*secretBinding {
	if len(names) != 1 {
		return nil
	}
	return inj.bound[net.JoinHostPort(names[0], strconv.Itoa(int(port)))]
}

// carries reports whether s holds the placeholder, as is, percent-encoded
// or inside Basic credentials.
func (inj *injector) carries(s string) bool {
	if strings.Contains(s, string(inj.placeholder)) {
		return true
	}
	if strings.IndexByte(s, '%') >= 0 {
		if u, err := url.QueryUnescape(s); err == nil && strings.Contains(u, string(inj.placeholder)) {
			return true
		}
	}
	if len(s) > 6 && strings.EqualFold(s[:6], "basic ") {
		if b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s[6:])); err == nil && bytes.Contains(b, inj.placeholder) {
			return true
		}
	}
	return false
}

// headCarries reports whether a plain HTTP request head carries the
// placeholder (request line or any header).
func (inj *injector) headCarries(b []byte) bool {
	if end := bytes.Index(b, []byte("\n\r\n")); end >= 0 {
		b = b[:end+1]
	} else if end := bytes.Index(b, []byte("\n\n")); end >= 0 {
		b = b[:end+1]
	}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		s := strings.TrimRight(string(line), "\r")
		if colon := strings.IndexByte(s, ':'); colon > 0 {
			s2 := strings.TrimSpace(s[colon+1:])
			if inj.carries(s2) {
				return true
			}
		}
		if inj.carries(s) {
			return true
		}
	}
	return false
}

// proxyRequestCarries reports whether a proxy's plain HTTP request
// carries the placeholder.
func (inj *injector) proxyRequestCarries(req *proxyRequest) bool {
	if inj.carries(req.path) {
		return true
	}
	for _, h := range req.headers {
		if inj.carries(h.value) {
			return true
		}
	}
	return false
}

// placeholderDenial is the refusal of a request with a placeholder to a
// host that has no secret for it.
func placeholderDenial(name string, dst netip.AddrPort) Denial {
	return Denial{Kind: KindSecret, Name: name, Addr: dst, Reason: "request carries a secret placeholder for another host"}
}

// spliceInject is splice for a connection that may be intercepted: the
// server's bytes flow to the client from the start as in splice, through
// a gate that can stop that copy while no byte has passed it yet. A
// ClientHello for a bound host stops it and the connection is served by
// the injector; a server that spoke first keeps its connection spliced
// (and end-to-end: nothing is intercepted once a byte has passed).
func (e *Engine) spliceInject(c, up net.Conn, dst netip.AddrPort, check nameCheck) {
	g := &gate{Conn: up}
	done := make(chan struct{})
	go func() {
		defer close(done)
		bp := bufPool.Get().(*[]byte)
		defer bufPool.Put(bp)
		if err := copyConn(c, g, *bp); err != nil && !errors.Is(err, errGateStopped) {
			abort(c, up)
		}
	}()

	bp := bufPool.Get().(*[]byte)
	buf := *bp
	n, ok, kind, names := e.inspectNames(c, buf, dst, check)
	if ok && kind == KindSNI {
		if bs := e.inject.bindingsFor(names, dst.Port()); bs != nil && g.stop() {
			<-done
			up.SetReadDeadline(time.Time{})
			first := append([]byte(nil), buf[:n]...)
			bufPool.Put(bp)
			e.inject.intercept(c, up, first, dst, bs)
			c.Close()
			up.Close()
			return
		}
	}
	relayClient(c, up, bp, n, ok, done)
}

var errGateStopped = errors.New("stopped for interception")

// gate is the upstream side of a connection that may be intercepted.
type gate struct {
	net.Conn
	mu      sync.Mutex
	passed  bool // a byte (or the end of stream) went to the client
	stopped bool
}

func (g *gate) Read(p []byte) (int, error) {
	n, err := g.Conn.Read(p)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return 0, errGateStopped
	}
	if n > 0 || err != nil {
		g.passed = true
	}
	return n, err
}

// stop ends the copy from the server if nothing has passed yet; the
// caller then waits for the copy to end.
func (g *gate) stop() bool {
	g.mu.Lock()
	if g.passed {
		g.mu.Unlock()
		return false
	}
	g.stopped = true
	g.mu.Unlock()
	g.Conn.SetReadDeadline(time.Unix(1, 0))
	return true
}

// session is one intercepted client connection.
type session struct {
	inj      *injector
	host     string
	dst      netip.AddrPort
	bindings []*secretBinding
	target   *url.URL
	proxy    *httputil.ReverseProxy
	tr       *http.Transport

	mu     sync.Mutex
	first  net.Conn // the connection dialled for the flow, used first
	extra  []net.Conn
	closed bool
}

// intercept serves an intercepted connection: TLS with a minted
// certificate, HTTP/1.1 or HTTP/2, each request passed on with its
// secrets over a verified TLS connection to the same destination. first
// are the client's bytes already read (its ClientHello).
func (inj *injector) intercept(c, up net.Conn, first []byte, dst netip.AddrPort, bs []*secretBinding) {
	s := &session{inj: inj, host: bs[0].host, dst: dst, bindings: bs, first: up}
	hostport := s.host
	if dst.Port() != 443 {
		hostport = net.JoinHostPort(s.host, strconv.Itoa(int(dst.Port())))
	}
	s.target = &url.URL{Scheme: "https", Host: hostport}
	s.tr = &http.Transport{
		DialContext:         s.dial,
		TLSClientConfig:     &tls.Config{RootCAs: inj.roots, ServerName: s.host, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxConnsPerHost:     maxUpstreamPerConn,
		MaxIdleConnsPerHost: maxUpstreamPerConn,
		IdleConnTimeout:     90 * time.Second,
	}
	s.proxy = &httputil.ReverseProxy{
		Rewrite:        s.rewrite,
		Transport:      s.tr,
		FlushInterval:  -1,
		ErrorLog:       log.New(io.Discard, "", 0),
		ErrorHandler:   s.upstreamError,
		ModifyResponse: s.response,
	}
	rc := &replayConn{Conn: c, pending: first, gone: make(chan struct{})}
	tc := tls.Server(rc, inj.tlsConf)
	inj.start()
	inj.sessions.Store(tc, s)
	if !inj.ln.push(tc) {
		inj.sessions.Delete(tc)
		rc.Close()
	}
	<-rc.gone
	s.mu.Lock()
	s.closed = true
	extra, first0 := s.extra, s.first
	s.extra, s.first = nil, nil
	s.mu.Unlock()
	s.tr.CloseIdleConnections()
	for _, x := range extra {
		x.Close()
		inj.e.untrack(x)
	}
	if first0 != nil {
		first0.Close()
	}
}

// start starts the HTTP server of intercepted connections.
func (inj *injector) start() {
	inj.startOnce.Do(func() {
		inj.ln = &connListener{conns: make(chan net.Conn), done: make(chan struct{})}
		p := new(http.Protocols)
		p.SetHTTP1(true)
		p.SetHTTP2(true)
		inj.srv = &http.Server{
			Handler:           http.HandlerFunc(inj.serveHTTP),
			Protocols:         p,
			ReadHeaderTimeout: time.Minute,
			IdleTimeout:       5 * time.Minute,
			ErrorLog:          log.New(io.Discard, "", 0),
			ConnContext: func(ctx context.Context, c net.Conn) context.Context {
				if s, ok := inj.sessions.LoadAndDelete(c); ok {
					return context.WithValue(ctx, sessionKey{}, s)
				}
				return ctx
			},
		}
		go inj.srv.Serve(inj.ln)
	})
}

// close ends the server (the connections it serves end with the engine's).
func (inj *injector) close() {
	inj.startOnce.Do(func() {})
	if inj.ln != nil {
		inj.ln.Close()
	}
}

type sessionKey struct{}

// dial is the Transport's: the flow's own connection first, then new
// ones to the same destination through the engine's dialer (the address
// the Transport asks for is not used: it never resolves names).
func (s *session) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, net.ErrClosed
	}
	if c := s.first; c != nil {
		s.first = nil
		s.mu.Unlock()
		return c, nil
	}
	s.mu.Unlock()
	e := s.inj.e
	ctx, cancel := context.WithTimeout(ctx, e.dialTimeout)
	defer cancel()
	c, err := e.dialer.DialTCP(ctx, s.host, s.dst)
	if err != nil {
		e.stats.dialErrors.Add(1)
		return nil, fmt.Errorf("dialling %s: %w", s.dst, err)
	}
	if !e.track(c) {
		c.Close()
		return nil, net.ErrClosed
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		e.untrack(c)
		return nil, net.ErrClosed
	}
	s.extra = append(s.extra, c)
	s.mu.Unlock()
	return c, nil
}

// serveHTTP checks a request of an intercepted connection and passes it
// on.
func (inj *injector) serveHTTP(w http.ResponseWriter, r *http.Request) {
	s, _ := r.Context().Value(sessionKey{}).(*session)
	if s == nil {
		http.Error(w, "agentkernel: no session for this connection", http.StatusInternalServerError)
		return
	}
	name, _, port, ok := splitAuthority(r.Host, s.dst.Port())
	if !ok || name != s.host || port != s.dst.Port() {
		// A shared front end could route another Host elsewhere, with
		// the secret: only the bound host is served here.
		inj.e.deny(Denial{Kind: KindSecret, Name: s.host, Addr: s.dst, Reason: "request names another host than its TLS server name"})
		w.Header().Set("Connection", "close")
		http.Error(w, fmt.Sprintf("agentkernel: this connection is for %s only", s.host), http.StatusMisdirectedRequest)
		return
	}
	if where := s.stray(r); where != "" {
		inj.e.deny(Denial{Kind: KindSecret, Name: s.host, Addr: s.dst, Reason: "request carries a secret placeholder outside the header its secret is bound to (" + where + ")"})
		http.Error(w, "agentkernel: refused: the request carries a secret placeholder in "+where+", where no secret is injected", http.StatusForbidden)
		return
	}
	s.proxy.ServeHTTP(w, r)
}

// stray says where a request carries the placeholder other than in a
// header a secret replaces, "" when it does not.
func (s *session) stray(r *http.Request) string {
	inj := s.inj
	if inj.carries(r.URL.RawPath) || inj.carries(r.URL.Path) || inj.carries(r.URL.RawQuery) {
		return "the URL"
	}
	for k, vs := range r.Header {
		if s.bound(k) {
			continue
		}
		for _, v := range vs {
			if inj.carries(v) {
				return "header " + k
			}
		}
	}
	return ""
}

func (s *session) bound(header string) bool {
	for _, b := range s.bindings {
		if b.header == header {
			return true
		}
	}
	return false
}

// rewrite makes the upstream request: the bound host, the secrets in
// their headers (whatever the client put there replaced), the answer
// uncompressed so that it can be checked for the secrets.
func (s *session) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(s.target)
	for _, b := range s.bindings {
		pr.Out.Header[b.header] = []string{b.value}
	}
	// The Transport asks for gzip and decodes it itself.
	pr.Out.Header.Del("Accept-Encoding")
	var once sync.Once
	trace := &httptrace.ClientTrace{WroteHeaders: func() {
		once.Do(func() {
			for _, b := range s.bindings {
				s.inj.e.stats.injected.Add(1)
				if s.inj.onInject != nil {
					s.inj.onInject(b.key, s.host)
				}
			}
		})
	}}
	pr.Out = pr.Out.WithContext(httptrace.WithClientTrace(pr.Out.Context(), trace))
}

// errUncheckable is a response body in an encoding that cannot be
// checked for the secrets.
var errUncheckable = errors.New("encoded answer")

// response hides the secrets in what comes back: an upstream that
// echoes a request's headers must not hand the sandbox its secret.
func (s *session) response(resp *http.Response) error {
	inj := s.inj
	redactHeader(resp.Header, inj.secrets)
	// An alternative service (HTTP/3 over UDP) would take the client
	// past the injector: it is not offered.
	resp.Header.Del("Alt-Svc")
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return nil
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		resp.Body.Close()
		return fmt.Errorf("%w: %s", errUncheckable, ce)
	}
	resp.Body = &redactor{r: resp.Body, secrets: inj.secrets, trailer: &resp.Trailer}
	return nil
}

// upstreamError answers a request that could not be passed on.
func (s *session) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the client went away
	}
	var cv *tls.CertificateVerificationError
	switch {
	case errors.As(err, &cv):
		why := printable(cv.Err.Error(), 300)
		s.inj.e.deny(Denial{Kind: KindSecret, Name: s.host, Addr: s.dst, Reason: "upstream certificate: " + why})
		http.Error(w, fmt.Sprintf("agentkernel: refused the certificate of %s (%s): %s", s.host, s.dst, why), http.StatusBadGateway)
	case errors.Is(err, errUncheckable):
		s.inj.e.deny(Denial{Kind: KindSecret, Name: s.host, Addr: s.dst, Reason: "upstream sent an answer in an encoding not asked for"})
		http.Error(w, fmt.Sprintf("agentkernel: %s sent an answer in an encoding that was not asked for (%v)", s.host, err), http.StatusBadGateway)
	default:
		http.Error(w, fmt.Sprintf("agentkernel: %s (%s) could not be reached: %v", s.host, s.dst, err), http.StatusBadGateway)
	}
}

// printable is s without control characters, cut to at most max bytes
// (an upstream's certificate names end up in refusals).
func printable(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r > 0x7e {
			return '?'
		}
		return r
	}, s)
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

// redactHeader masks every secret in h's values.
func redactHeader(h http.Header, secrets [][]byte) {
	for k, vs := range h {
		for i, v := range vs {
			for _, sec := range secrets {
				if strings.Contains(v, string(sec)) {
					v = strings.ReplaceAll(v, string(sec), strings.Repeat("*", len(sec)))
				}
			}
			h[k][i] = v
		}
	}
}

// redactor masks the secrets in a body, each byte for a '*' (the length
// is kept, and with it the framing). It holds back only a tail that could
// be the start of a secret, so streams are not delayed (an event stream's
// chunks end in a line break, which no secret starts with).
type redactor struct {
	r       io.ReadCloser
	secrets [][]byte
	trailer *http.Header
	// buf[off:end] is released and not yet returned, buf[end:] held back.
	buf      []byte
	off, end int
	err      error
}

func (d *redactor) Read(p []byte) (int, error) {
	for d.off == d.end {
		// Keep what was held back, at the start.
		d.buf = d.buf[:copy(d.buf, d.buf[d.end:])]
		d.off, d.end = 0, 0
		if d.err != nil {
			if len(d.buf) > 0 {
				d.mask()
				d.end = len(d.buf)
				continue
			}
			if d.err == io.EOF && d.trailer != nil && *d.trailer != nil {
				redactHeader(*d.trailer, d.secrets)
			}
			return 0, d.err
		}
		if cap(d.buf)-len(d.buf) < 4<<10 {
			d.buf = append(make([]byte, 0, len(d.buf)+32<<10), d.buf...)
		}
		n, err := d.r.Read(d.buf[len(d.buf):cap(d.buf)])
		d.buf = d.buf[:len(d.buf)+n]
		d.err = err
		if n == 0 {
			continue
		}
		d.mask()
		d.end = len(d.buf) - d.partial()
	}
	n := copy(p, d.buf[d.off:d.end])
	d.off += n
	return n, nil
}

func (d *redactor) mask() {
	for _, s := range d.secrets {
		for i := 0; ; {
			j := bytes.Index(d.buf[i:], s)
			if j < 0 {
				break
			}
			for k := range s {
				d.buf[i+j+k] = '*'
			}
			i += j + len(s)
		}
	}
}

// partial is the length of the longest tail of buf that is the start of
// a secret.
func (d *redactor) partial() int {
	best := 0
	for _, s := range d.secrets {
		for k := min(len(s)-1, len(d.buf)); k > best; k-- {
			if bytes.Equal(d.buf[len(d.buf)-k:], s[:k]) {
				best = k
				break
			}
		}
	}
	return best
}

func (d *redactor) Close() error { return d.r.Close() }

// replayConn is a client connection whose first bytes were read
// already; gone is closed when it is.
type replayConn struct {
	net.Conn
	mu      sync.Mutex
	pending []byte
	once    sync.Once
	gone    chan struct{}
}

func (c *replayConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	return c.Conn.Read(p)
}

func (c *replayConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.gone) })
	return err
}

// connListener hands the intercepted connections to the HTTP server.
type connListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *connListener) push(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

package netpolicy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// Limits of proxy mode.
const (
	// proxyHeadTimeout is how long a client has to send a whole request
	// head.
	proxyHeadTimeout = 10 * time.Second
	// maxProxyHead bounds a request head, and a response head from an
	// origin.
	maxProxyHead = 32 << 10
	// maxProxyHeaders bounds the header lines of a request.
	maxProxyHeaders = 128
	// lingerTimeout is how long a connection that is being closed is read
	// from (and discarded) after the last answer, so that bytes the client
	// sent and that nobody read do not turn the close into a RST that
	// destroys the answer; at most maxLinger bytes.
	lingerTimeout = 2 * time.Second
	maxLinger     = 1 << 20
	// maxChunkLine bounds a chunk-size line of a chunked body.
	maxChunkLine = 4096
)

// proxyServer is one ServeProxy loop.
type proxyServer struct {
	ln     net.Listener
	ctx    context.Context // ends when the loop does
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{} // the clients' connections
}

// shutdown closes the listener and every client connection; it does not
// wait.
func (s *proxyServer) shutdown() {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = map[net.Conn]struct{}{}
	s.mu.Unlock()
	s.cancel()
	s.ln.Close()
	for c := range conns {
		c.Close()
	}
}

// ServeProxy serves ln, a listener inside the sandbox, as an HTTP proxy
// under the engine's policy: for sandboxes without a TUN device, whose
// programs reach the network through HTTP_PROXY and HTTPS_PROXY. It
// answers CONNECT host:port (tunnels, inspected like TCP connections:
// the TLS SNI or HTTP Host inside must be the name the tunnel was asked
// for) and requests with an absolute http:// URL (forwarded, one per
// connection); anything else gets 400. A destination is decided by its
// name: the name must be one the sandbox may resolve, it is resolved
// through the engine's upstream resolvers with the rebinding filter,
// and the address dialled must pass the address rules. A refusal is a
// 403 whose one-line body says what was refused and the flag that would
// allow it, reported like any other refusal.
//
// ServeProxy returns when ln is closed or the engine is (Close closes
// ln), nil then, or an error when ln fails otherwise. Every connection it
// served has ended when it returns.
func (e *Engine) ServeProxy(ln net.Listener) error {
	ctx, cancel := context.WithCancel(context.Background())
	s := &proxyServer{ln: ln, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		cancel()
		ln.Close()
		return nil
	}
	if e.proxies == nil {
		e.proxies = map[*proxyServer]struct{}{}
	}
	e.proxies[s] = struct{}{}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.proxies, s)
		e.mu.Unlock()
		s.shutdown()
		s.wg.Wait()
	}()

	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.ctx.Err() != nil {
				return nil
			}
			if !retryableAccept(err) {
				return fmt.Errorf("proxy listener: %w", err)
			}
			// Out of file descriptors or a connection that went away
			// before it was accepted: wait a little and go on.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(backoff):
			case <-s.ctx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		switch e.addProxyClient(s, c) {
		case addClosed:
			c.Close()
			return nil
		case addFull:
			c.SetWriteDeadline(time.Now().Add(lingerTimeout))
			writeProxyError(c, 503, fmt.Sprintf("the sandbox's proxy serves %d connections at once already", e.maxConns))
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer e.removeProxyClient(s, c)
			e.serveProxyConn(s.ctx, c)
		}()
	}
}

func retryableAccept(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EPROTO, syscall.EINTR} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

const (
	addOK = iota
	addFull
	addClosed
)

func (e *Engine) addProxyClient(s *proxyServer, c net.Conn) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return addClosed
	}
	if e.proxyClients >= e.maxConns {
		return addFull
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return addClosed
	}
	s.conns[c] = struct{}{}
	e.proxyClients++
	return addOK
}

func (e *Engine) removeProxyClient(s *proxyServer, c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	e.mu.Lock()
	e.proxyClients--
	e.mu.Unlock()
}

// proxyRequest is a request head read from a proxy client.
type proxyRequest struct {
	method  string
	version string // HTTP/1.0 or HTTP/1.1
	host    string // lower-case name, or an IP literal (canonical)
	ip      netip.Addr
	port    uint16
	path    string // origin-form target (not for CONNECT)
	headers []header
	// The request body: chunked, or contentLength bytes (-1: none given).
	chunked       bool
	contentLength int64
	// hostHeader is the Host header when it names another host than the
	// URL ("" when it agrees or is absent).
	hostHeader string
}

type header struct{ name, value string }

// proxyError is an answer to give a client instead of serving it.
type proxyError struct {
	status int
	msg    string
}

func (p *proxyError) Error() string { return p.msg }

func badRequest(format string, args ...any) *proxyError {
	return &proxyError{status: 400, msg: fmt.Sprintf(format, args...)}
}

var errHeadTooLong = errors.New("request head too long")

// serveProxyConn serves one client connection.
func (e *Engine) serveProxyConn(ctx context.Context, c net.Conn) {
	br := bufio.NewReaderSize(c, 4096)
	c.SetReadDeadline(time.Now().Add(e.headTimeout))
	req, err := readProxyRequest(br)
	if err != nil {
		var pe *proxyError
		switch {
		case errors.As(err, &pe):
		case errors.Is(err, errHeadTooLong):
			pe = &proxyError{status: 431, msg: fmt.Sprintf("request head longer than %d bytes", maxProxyHead)}
		case isTimeout(err):
			pe = &proxyError{status: 408, msg: fmt.Sprintf("no complete request head within %v", e.headTimeout)}
		default:
			// The client went away, or closed without a request.
			return
		}
		e.refuseProxy(c, br, pe.status, pe.msg)
		return
	}
	c.SetReadDeadline(time.Time{})
	bc := &bufConn{Conn: c, br: br}
	if req.method == "CONNECT" {
		e.proxyConnect(ctx, bc, req)
		return
	}
	e.proxyForward(ctx, bc, req)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// readHeadLine reads one line of a head, without its line end; total
// counts the head's bytes against maxProxyHead.
func readHeadLine(br *bufio.Reader, total *int) (string, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		*total += len(frag)
		if *total > maxProxyHead {
			return "", errHeadTooLong
		}
		line = append(line, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if *total > 0 && errors.Is(err, io.EOF) {
				return "", badRequest("the request head ends before its empty line")
			}
			return "", err
		}
		break
	}
	l := strings.TrimSuffix(strings.TrimSuffix(string(line), "\n"), "\r")
	for i := 0; i < len(l); i++ {
		if c := l[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return "", badRequest("control character in the request head")
		}
	}
	return l, nil
}

// readProxyRequest reads and checks a request head.
func readProxyRequest(br *bufio.Reader) (*proxyRequest, error) {
	total := 0
	line := ""
	for line == "" { // empty lines before a request are skipped
		var err error
		if line, err = readHeadLine(br, &total); err != nil {
			return nil, err
		}
	}
	parts := strings.Split(line, " ")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return nil, badRequest("malformed request line")
	}
	req := &proxyRequest{method: parts[0], version: parts[2], contentLength: -1}
	if req.version != "HTTP/1.1" && req.version != "HTTP/1.0" {
		return nil, badRequest("unsupported HTTP version %q (HTTP/1.1 or HTTP/1.0)", req.version)
	}
	for i := 0; i < len(req.method); i++ {
		if !isTokenChar(req.method[i]) {
			return nil, badRequest("malformed method")
		}
	}
	for {
		l, err := readHeadLine(br, &total)
		if err != nil {
			return nil, err
		}
		if l == "" {
			break
		}
		if len(req.headers) == maxProxyHeaders {
			return nil, badRequest("more than %d header lines", maxProxyHeaders)
		}
		if l[0] == ' ' || l[0] == '\t' {
			return nil, badRequest("folded header line")
		}
		colon := strings.IndexByte(l, ':')
		if colon <= 0 {
			return nil, badRequest("malformed header line")
		}
		for i := 0; i < colon; i++ {
			if !isTokenChar(l[i]) {
				return nil, badRequest("malformed header name")
			}
		}
		req.headers = append(req.headers, header{name: l[:colon], value: strings.Trim(l[colon+1:], " \t")})
	}

	target := parts[1]
	if req.method == "CONNECT" {
		host, ip, port, ok := splitAuthority(target, 0)
		if !ok {
			return nil, badRequest("CONNECT wants host:port, not %q", target)
		}
		req.host, req.ip, req.port = host, ip, port
		return req, nil
	}
	scheme, rest, found := strings.Cut(target, "://")
	switch {
	case !found:
		return nil, badRequest("this is the sandbox's HTTP proxy: ask for an absolute http:// URL, or CONNECT host:port")
	case strings.EqualFold(scheme, "https"):
		return nil, badRequest("https:// URLs go through CONNECT")
	case !strings.EqualFold(scheme, "http"):
		return nil, badRequest("unsupported URL scheme %q", scheme)
	}
	if strings.ContainsAny(rest, "#") {
		return nil, badRequest("a fragment in the request URL")
	}
	authority, path := rest, "/"
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, path = rest[:i], rest[i:]
		if path[0] == '?' {
			path = "/" + path
		}
	}
	if strings.Contains(authority, "@") {
		return nil, badRequest("credentials in the request URL")
	}
	host, ip, port, ok := splitAuthority(authority, 80)
	if !ok {
		return nil, badRequest("malformed host in the request URL")
	}
	req.host, req.ip, req.port, req.path = host, ip, port, path

	hosts, te := 0, 0
	for _, h := range req.headers {
		switch strings.ToLower(h.name) {
		case "host":
			hosts++
			hh, hip, hport, ok := splitAuthority(h.value, 80)
			if !ok {
				return nil, badRequest("malformed Host header")
			}
			if hh != host || hip != ip || hport != port {
				req.hostHeader = h.value
			}
		case "content-length":
			n, err := strconv.ParseInt(h.value, 10, 64)
			if err != nil || n < 0 || strings.TrimLeft(h.value, "0123456789") != "" {
				return nil, badRequest("malformed Content-Length")
			}
			if req.contentLength >= 0 && req.contentLength != n {
				return nil, badRequest("two different Content-Lengths")
			}
			req.contentLength = n
		case "transfer-encoding":
			te++
			if !strings.EqualFold(h.value, "chunked") {
				return nil, badRequest("unsupported Transfer-Encoding %q (only chunked)", h.value)
			}
			req.chunked = true
		}
	}
	if hosts > 1 {
		return nil, badRequest("more than one Host header")
	}
	if te > 1 || req.chunked && (req.contentLength >= 0 || req.version == "HTTP/1.0") {
		return nil, badRequest("ambiguous request body length (Transfer-Encoding with Content-Length, or twice)")
	}
	return req, nil
}

func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// splitAuthority reads "host:port", "[v6]:port", or, when defPort is
// not 0, the same without the port. The host is a normalised name or
// a canonical IP literal (ip then valid).
func splitAuthority(s string, defPort uint16) (host string, ip netip.Addr, port uint16, ok bool) {
	h, p := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", ip, 0, false
		}
		h, p = s[1:end], s[end+1:]
		if p != "" {
			if p[0] != ':' {
				return "", ip, 0, false
			}
			p = p[1:]
			if p == "" {
				return "", ip, 0, false
			}
		}
		a, err := netip.ParseAddr(h)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", ip, 0, false
		}
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 {
		h, p = s[:i], s[i+1:]
		if strings.Contains(h, ":") || p == "" {
			return "", ip, 0, false // an IPv6 literal without brackets
		}
	}
	port = defPort
	if p != "" {
		if len(p) > 5 || strings.TrimLeft(p, "0123456789") != "" {
			return "", ip, 0, false
		}
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return "", ip, 0, false
		}
		port = uint16(n)
	}
	if port == 0 {
		return "", ip, 0, false
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return "", ip, 0, false
		}
		a = canonical(a)
		return a.String(), a, port, true
	}
	name, ok := normalName(h)
	if !ok {
		return "", ip, 0, false
	}
	// A last label of digits is no domain name but an address in a form
	// that some resolvers read (127.1, 2130706433): not a name to decide by.
	last := name[strings.LastIndexByte(name, '.')+1:]
	if strings.TrimLeft(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return "", ip, 0, false
	}
	return name, ip, port, true
}

// proxyDial decides a proxy request's destination and dials it. It
// returns the upstream connection, the address dialled and the check
// for the names the client presents later, or the answer to give.
func (e *Engine) proxyDial(ctx context.Context, req *proxyRequest) (net.Conn, netip.AddrPort, nameCheck, *proxyError) {
	var (
		cands    []netip.AddrPort
		dialName string
		check    nameCheck
		dst      netip.AddrPort
	)
	if req.ip.IsValid() {
		dst = netip.AddrPortFrom(req.ip, req.port)
		names, explicit, d := e.decideTCP(dst)
		if d != nil {
			return nil, dst, nil, e.refuseDenial(*d)
		}
		if len(names) > 0 {
			dialName = names[0]
		}
		cands = []netip.AddrPort{dst}
		check = func(kind string, names []string) *Denial { return e.checkNames(kind, names, dst, explicit) }
	} else {
		name := req.host
		if !e.allowedName(name) {
			return nil, dst, nil, e.refuseDenial(e.nameDenial(name))
		}
		addrs, d, err := e.resolveForProxy(ctx, name)
		if len(addrs) == 0 {
			switch {
			case d != nil:
				return nil, dst, nil, &proxyError{status: 403, msg: denialText(*d)}
			case err != nil:
				return nil, dst, nil, &proxyError{status: 502, msg: fmt.Sprintf("cannot resolve %s: %v", name, err)}
			default:
				return nil, dst, nil, &proxyError{status: 502, msg: fmt.Sprintf("%s has no address", name)}
			}
		}
		var refused *Denial
		for _, a := range addrs {
			ap := netip.AddrPortFrom(a, req.port)
			if _, _, d := e.decideTCP(ap); d != nil {
				if refused == nil {
					refused = d
				}
				continue
			}
			cands = append(cands, ap)
		}
		if len(cands) == 0 {
			return nil, dst, nil, e.refuseDenial(*refused)
		}
		dialName = name
		check = func(kind string, names []string) *Denial {
			for _, n := range names {
				if n != name {
					return &Denial{Kind: kind, Name: n, Addr: dst, Reason: "not the name the proxy was asked for (" + name + ")"}
				}
			}
			return nil
		}
	}

	ok, full := e.reserve()
	if !ok {
		if full {
			d := Denial{Kind: KindTCP, Addr: cands[0], Reason: fmt.Sprintf("more than %d connections at once", e.maxConns)}
			e.deny(d)
			return nil, dst, nil, &proxyError{status: 503, msg: denialText(d)}
		}
		return nil, dst, nil, &proxyError{status: 503, msg: "the sandbox's network is shutting down"}
	}
	dctx, cancel := context.WithTimeout(ctx, e.dialTimeout)
	defer cancel()
	var lastErr error
	for _, ap := range cands {
		up, err := e.dialer.DialTCP(dctx, dialName, ap)
		if err == nil {
			dst = ap
			return up, dst, check, nil
		}
		lastErr = err
		if dctx.Err() != nil {
			break
		}
	}
	e.unreserve()
	e.stats.dialErrors.Add(1)
	return nil, dst, nil, &proxyError{status: 502, msg: fmt.Sprintf("cannot connect to %s port %d: %v", req.host, req.port, lastErr)}
}

// refuseDenial reports d and makes it the client's 403.
func (e *Engine) refuseDenial(d Denial) *proxyError {
	e.deny(d)
	return &proxyError{status: 403, msg: denialText(d)}
}

func denialText(d Denial) string {
	return "blocked by the sandbox's network policy: " + d.String()
}

// resolveForProxy asks the upstream resolvers for name's A and AAAA
// records, as the sandbox's own resolver does: refused addresses dropped,
// kept ones remembered under name. It returns the addresses (IPv4
// first), the denial the answers caused, if any, and the error when no
// answer came.
func (e *Engine) resolveForProxy(ctx context.Context, name string) ([]netip.Addr, *Denial, error) {
	type result struct {
		m   *dns.Msg
		d   *Denial
		err error
	}
	var res [2]result
	var wg sync.WaitGroup
	for i, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case e.dnsFlight <- struct{}{}:
				defer func() { <-e.dnsFlight }()
			default:
				e.stats.dnsErrors.Add(1)
				res[i].err = errors.New("too many DNS queries at once")
				return
			}
			req := new(dns.Msg).SetQuestion(dns.Fqdn(name), qt)
			req.RecursionDesired = true
			qctx, cancel := context.WithTimeout(ctx, e.dnsTimeout*time.Duration(max(len(e.resolvers), 1)))
			defer cancel()
			resp, err := e.exchange(qctx, req, req.Question[0])
			if err != nil {
				e.stats.dnsErrors.Add(1)
				res[i].err = err
				return
			}
			e.allowed(KindDNS)
			res[i].m, res[i].d = e.filterAnswer(req, resp, name)
		}()
	}
	wg.Wait()
	var (
		out  []netip.Addr
		deny *Denial
		err  error
	)
	for _, r := range res {
		if r.err != nil {
			err = r.err
			continue
		}
		if r.d != nil && deny == nil {
			deny = r.d
		}
		if r.m.Rcode != dns.RcodeSuccess {
			continue
		}
		for _, rr := range r.m.Answer {
			var a netip.Addr
			switch x := rr.(type) {
			case *dns.A:
				a, _ = netip.AddrFromSlice(x.A.To4())
			case *dns.AAAA:
				a, _ = netip.AddrFromSlice(x.AAAA.To16())
			}
			if a.IsValid() {
				a = canonical(a)
				if !containsAddr(out, a) {
					out = append(out, a)
				}
			}
		}
	}
	for _, r := range res {
		if r.d != nil && r.m != nil && r.m.Rcode == dns.RcodeNameError {
			// A CNAME chain into a blocked name refuses the name whatever
			// the other answer held.
			return nil, r.d, nil
		}
	}
	return out, deny, err
}

func containsAddr(l []netip.Addr, a netip.Addr) bool {
	for _, x := range l {
		if x == a {
			return true
		}
	}
	return false
}

// proxyOpen dials req's destination and tracks the client's connection
// with it; a refusal or failure is answered to the client (false).
func (e *Engine) proxyOpen(ctx context.Context, c *bufConn, req *proxyRequest) (net.Conn, netip.AddrPort, nameCheck, bool) {
	up, dst, check, pe := e.proxyDial(ctx, req)
	if pe != nil {
		e.refuseProxy(c, c.br, pe.status, pe.msg)
		return nil, dst, nil, false
	}
	tracked := e.track(c, up)
	e.unreserve()
	if !tracked {
		up.Close()
		return nil, dst, nil, false
	}
	return up, dst, check, true
}

// proxyConnect serves CONNECT: a tunnel whose first bytes are inspected
// like a TCP connection's.
func (e *Engine) proxyConnect(ctx context.Context, c *bufConn, req *proxyRequest) {
	up, dst, check, ok := e.proxyOpen(ctx, c, req)
	if !ok {
		return
	}
	defer e.untrack(c, up)
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		up.Close()
		return
	}
	e.allowed(KindTCP)
	e.splice(c, up, dst, check)
}

// hopByHop are the request and response headers that concern one
// connection only, not passed on.
var hopByHop = map[string]bool{
	"connection": true, "proxy-connection": true, "keep-alive": true,
	"proxy-authorization": true, "proxy-authenticate": true, "te": true, "upgrade": true,
}

// framing are headers that the proxy frames the body by: never dropped
// because a Connection header lists them.
var framing = map[string]bool{"content-length": true, "transfer-encoding": true, "host": true}

// dropped are the header names (lower case) not to pass on: the
// hop-by-hop ones and those Connection lists.
func dropped(headers []header) map[string]bool {
	m := map[string]bool{}
	for k := range hopByHop {
		m[k] = true
	}
	for _, h := range headers {
		if !strings.EqualFold(h.name, "connection") {
			continue
		}
		for _, t := range strings.Split(h.value, ",") {
			if t = strings.ToLower(strings.TrimSpace(t)); t != "" && !framing[t] {
				m[t] = true
			}
		}
	}
	return m
}

// proxyForward serves a request with an absolute http:// URL: one request
// to the origin, whose answer is passed back, then the connection ends.
func (e *Engine) proxyForward(ctx context.Context, c *bufConn, req *proxyRequest) {
	if req.hostHeader != "" {
		d := Denial{Kind: KindHost, Name: req.hostHeader, Reason: "Host header names another host than the request's URL (" + req.host + ")"}
		if n, _, _, ok := splitAuthority(req.hostHeader, 80); ok {
			d.Name = n
		}
		pe := e.refuseDenial(d)
		e.refuseProxy(c, c.br, pe.status, pe.msg)
		return
	}
	up, dst, check, ok := e.proxyOpen(ctx, c, req)
	if !ok {
		return
	}
	defer e.untrack(c, up)
	e.allowed(KindTCP)
	if d := check(KindHost, []string{req.host}); d != nil {
		up.Close()
		pe := e.refuseDenial(*d)
		e.refuseProxy(c, c.br, pe.status, pe.msg)
		return
	}
	if e.inject != nil && e.inject.proxyRequestCarries(req) {
		// A placeholder in plain HTTP: no secret is ever injected there.
		up.Close()
		pe := e.refuseDenial(placeholderDenial(req.host, dst))
		e.refuseProxy(c, c.br, pe.status, pe.msg)
		return
	}
	e.allowed(KindHost)

	// The request, in origin-form, with this proxy's headers.
	var head strings.Builder
	fmt.Fprintf(&head, "%s %s %s\r\n", req.method, req.path, req.version)
	hostport := req.host
	if req.ip.Is6() {
		hostport = "[" + hostport + "]"
	}
	if req.port != 80 {
		hostport += ":" + strconv.Itoa(int(req.port))
	}
	fmt.Fprintf(&head, "Host: %s\r\n", hostport)
	drop := dropped(req.headers)
	for _, h := range req.headers {
		if n := strings.ToLower(h.name); n != "host" && !drop[n] {
			fmt.Fprintf(&head, "%s: %s\r\n", h.name, h.value)
		}
	}
	head.WriteString("Connection: close\r\n\r\n")
	if _, err := io.WriteString(up, head.String()); err != nil {
		up.Close()
		e.refuseProxy(c, c.br, 502, fmt.Sprintf("%s (%s) went away: %v", req.host, dst, err))
		return
	}

	// The body goes up while the answer comes down; after the body, the
	// client's side is watched so that a client that goes away ends the
	// exchange.
	done := make(chan struct{})
	go func() {
		defer close(done)
		tw := &trackWriter{w: up}
		if err := copyBody(tw, c.br, req); err != nil {
			if tw.err == nil {
				// The client's body broke off: the exchange is over.
				abort(c, up)
			}
			// Else the origin stopped reading: its answer still comes.
			return
		}
		n, err := io.Copy(io.Discard, io.LimitReader(c, maxLinger))
		if err != nil && !isTimeout(err) || err == nil && n == maxLinger {
			up.Close()
		}
	}()

	ubr := bufio.NewReaderSize(up, 4096)
	wrote, err := relayResponseHead(c, ubr)
	if err == nil {
		_, err = ubr.WriteTo(c)
	}
	switch {
	case err != nil && !wrote:
		up.Close()
		e.writeRefusal(c, 502, fmt.Sprintf("%s (%s) sent no valid answer: %v", req.host, dst, err))
	case err != nil:
		abort(c, up)
	}
	up.Close()
	halfClose(c)
	c.SetReadDeadline(time.Now().Add(lingerTimeout))
	<-done
	c.Close()
}

// copyBody copies a request's body from br to up as its framing says:
// Content-Length bytes, or chunks (passed on with their sizes written
// anew, without chunk extensions).
func copyBody(up io.Writer, br *bufio.Reader, req *proxyRequest) error {
	if !req.chunked {
		if req.contentLength <= 0 {
			return nil
		}
		_, err := io.CopyN(up, br, req.contentLength)
		return err
	}
	w := bufio.NewWriterSize(up, 4096)
	for {
		line, err := readChunkLine(br)
		if err != nil {
			return err
		}
		sz, _, _ := strings.Cut(line, ";")
		sz = strings.TrimRight(sz, " \t")
		if sz == "" || len(sz) > 15 || strings.TrimLeft(sz, "0123456789abcdefABCDEF") != "" {
			return errors.New("malformed chunk size")
		}
		n, err := strconv.ParseInt(sz, 16, 64)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%x\r\n", n)
		if n == 0 {
			// Trailers, up to the empty line.
			for total := 0; ; {
				l, err := readChunkLine(br)
				if err != nil {
					return err
				}
				total += len(l)
				if total > maxProxyHead {
					return errors.New("trailers too long")
				}
				if l == "" {
					break
				}
				if colon := strings.IndexByte(l, ':'); colon <= 0 || l[0] == ' ' || l[0] == '\t' {
					return errors.New("malformed trailer")
				}
				fmt.Fprintf(w, "%s\r\n", l)
			}
			w.WriteString("\r\n")
			return w.Flush()
		}
		if _, err := io.CopyN(w, br, n); err != nil {
			return err
		}
		if l, err := readChunkLine(br); err != nil || l != "" {
			return errors.New("malformed chunk end")
		}
		w.WriteString("\r\n")
		if br.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// trackWriter remembers the error of its writes.
type trackWriter struct {
	w   io.Writer
	err error
}

func (t *trackWriter) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	if err != nil && t.err == nil {
		t.err = err
	}
	return n, err
}

// readChunkLine reads a line of a chunked body, without its line end.
func readChunkLine(br *bufio.Reader) (string, error) {
	total := 0
	l, err := readHeadLine(br, &total)
	if err == nil && total > maxChunkLine {
		return "", errors.New("chunk line too long")
	}
	return l, err
}

// relayResponseHead reads the origin's response heads from ubr and
// writes them to c without the hop-by-hop headers, the final one with
// "Connection: close"; interim (1xx) heads are passed on as they come.
// wrote reports whether anything was written to c.
func relayResponseHead(c net.Conn, ubr *bufio.Reader) (wrote bool, err error) {
	for {
		total := 0
		status, err := readHeadLine(ubr, &total)
		if err != nil {
			return wrote, err
		}
		f := strings.SplitN(status, " ", 3)
		if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/1.") || len(f[1]) != 3 || strings.TrimLeft(f[1], "0123456789") != "" {
			return wrote, errors.New("malformed status line")
		}
		var hs []header
		for {
			l, err := readHeadLine(ubr, &total)
			if err != nil {
				return wrote, err
			}
			if l == "" {
				break
			}
			colon := strings.IndexByte(l, ':')
			if colon <= 0 || l[0] == ' ' || l[0] == '\t' {
				return wrote, errors.New("malformed header line in the answer")
			}
			hs = append(hs, header{name: l[:colon], value: strings.Trim(l[colon+1:], " \t")})
		}
		interim := f[1][0] == '1' && f[1] != "101"
		var b strings.Builder
		b.WriteString(status)
		b.WriteString("\r\n")
		drop := dropped(hs)
		for _, h := range hs {
			if !drop[strings.ToLower(h.name)] {
				fmt.Fprintf(&b, "%s: %s\r\n", h.name, h.value)
			}
		}
		if !interim {
			b.WriteString("Connection: close\r\n")
		}
		b.WriteString("\r\n")
		if _, err := io.WriteString(c, b.String()); err != nil {
			return true, err
		}
		wrote = true
		if !interim {
			return true, nil
		}
	}
}

var statusText = map[int]string{
	400: "Bad Request", 403: "Forbidden", 408: "Request Timeout", 431: "Request Header Fields Too Large",
	502: "Bad Gateway", 503: "Service Unavailable",
}

// writeProxyError writes an answer with a one-line text body.
func writeProxyError(c net.Conn, status int, msg string) error {
	body := strings.ReplaceAll(msg, "\n", " ") + "\n"
	_, err := fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, statusText[status], len(body), body)
	return err
}

// writeRefusal writes an error answer, bounded in time.
func (e *Engine) writeRefusal(c net.Conn, status int, msg string) {
	c.SetWriteDeadline(time.Now().Add(lingerTimeout))
	writeProxyError(c, status, msg)
}

// refuseProxy answers a client with an error and closes the connection,
// after reading (and discarding) for a moment what it still sends.
func (e *Engine) refuseProxy(c net.Conn, br *bufio.Reader, status int, msg string) {
	e.writeRefusal(c, status, msg)
	halfClose(c)
	c.SetReadDeadline(time.Now().Add(lingerTimeout))
	io.CopyN(io.Discard, br, maxLinger)
	c.Close()
}

// bufConn is a client connection whose first bytes may sit in br.
type bufConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) {
	if c.br.Buffered() > 0 {
		return c.br.Read(p)
	}
	return c.Conn.Read(p)
}

func (c *bufConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("cannot half-close")
}

func (c *bufConn) SetLinger(sec int) error {
	if l, ok := c.Conn.(interface{ SetLinger(int) error }); ok {
		return l.SetLinger(sec)
	}
	return nil
}

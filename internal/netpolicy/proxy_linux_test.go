package netpolicy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// startProxy serves e as a proxy on a listener of the namespace's
// loopback (the sandbox's, as the proxy sees it); it returns the
// listener's address and ServeProxy's result once it returns.
func startProxy(t *testing.T, e *Engine) (string, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- e.ServeProxy(ln)
		close(done)
	}()
	t.Cleanup(func() {
		ln.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("ServeProxy did not return after its listener closed")
		}
	})
	return ln.Addr().String(), done
}

// proxyClient is a Go HTTP client that goes through the proxy at addr
// and trusts the test internet's CA.
func (w *world) proxyClient(t *testing.T, addr string) *http.Client {
	t.Helper()
	tr := &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: addr}),
		TLSClientConfig: &tls.Config{RootCAs: w.roots},
		// A request with a body waits for the origin's 100 Continue,
		// which the proxy must pass on.
		ExpectContinueTimeout: 10 * time.Second,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}
}

func get(c *http.Client, u string) (int, string, error) {
	resp, err := c.Get(u)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// rawProxy sends raw on a new connection to the proxy and returns the
// status code and body of its answer.
func rawProxy(t *testing.T, addr, raw string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodGet})
	if err != nil {
		t.Fatalf("%q: no answer: %v", raw, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == 200 && strings.HasPrefix(raw, "CONNECT ") {
		return 200, "" // a tunnel: no body
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// connectTunnel asks the proxy for a tunnel to target and returns the
// connection after a 200.
func connectTunnel(t *testing.T, addr, target string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("CONNECT %s: %s %s", target, resp.Status, b)
	}
	return &readerConn{Conn: c, r: br}
}

// readerConn is a connection whose reads come through r.
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c *readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// startEcho is an origin on 198.18.0.13 (a port other than 80) that
// answers with what it was sent.
func startEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "198.18.0.13:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go serveHTTP(ln, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body := fmt.Sprintf("%s %s host=%s body=%s te=%v auth=%q hop=%q conn=%q", r.Method, r.URL.RequestURI(), r.Host, b,
			r.TransferEncoding, r.Header.Get("Proxy-Authorization"), r.Header.Get("X-Hop"), r.Header.Get("Connection"))
		// Written raw: a Go server would not send these hop-by-hop headers.
		c, bw, err := http.NewResponseController(rw).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nConnection: X-Hop, keep-alive\r\nKeep-Alive: timeout=5\r\nX-Hop: origin\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		bw.Flush()
	}))
	return ln.Addr().(*net.TCPAddr).AddrPort().String()
}

// noProxyEnv is the environment without proxy settings.
func noProxyEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasSuffix(strings.ToLower(k), "_proxy") {
			env = append(env, kv)
		}
	}
	return env
}

func TestProxyAllowed(t *testing.T) {
	w := needWorld(t)
	e, ds := w.newEngine(t, filtered("*.allowed.test"), Options{})
	addr, _ := startProxy(t, e)
	c := w.proxyClient(t, addr)

	if code, body, err := get(c, "https://api.allowed.test/"); err != nil || code != 200 || body != "host=api.allowed.test" {
		t.Fatalf("HTTPS through the proxy: %d %q %v", code, body, err)
	}
	if code, body, err := get(c, "http://API.allowed.test./"); err != nil || code != 200 || body != "host=api.allowed.test" {
		t.Fatalf("HTTP through the proxy: %d %q %v", code, body, err)
	}
	if code, body, err := get(c, "https://v6only.allowed.test/"); err != nil || code != 200 || body != "host=v6only.allowed.test" {
		t.Fatalf("HTTPS to a name with only an IPv6 address: %d %q %v", code, body, err)
	}
	// A name whose private address the rebinding filter drops, on a port
	// other than 80: the public address is used.
	echo := startEcho(t)
	_, port, _ := net.SplitHostPort(echo)
	u := "http://rebind-priv.allowed.test:" + port + "/p?q=1"
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader("hello"))
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "client")
	req.Header.Set("Expect", "100-continue")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the 100 Continue did not come through (the request took %v)", d)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf(`POST /p?q=1 host=rebind-priv.allowed.test:%s body=hello te=[] auth="" hop="" conn="close"`, port)
	if string(b) != want {
		t.Fatalf("forwarded request:\n got %s\nwant %s", b, want)
	}
	if resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("X-Hop") != "" || !resp.Close {
		t.Fatalf("hop-by-hop headers of the answer passed on: %v (close %v)", resp.Header, resp.Close)
	}
	// A chunked body, sent raw, with a chunk extension.
	code, body := rawProxy(t, addr, "PUT http://rebind-priv.allowed.test:"+port+"/c HTTP/1.1\r\nHost: rebind-priv.allowed.test:"+port+
		"\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
	if code != 200 || !strings.Contains(body, "body=abcde te=[chunked]") {
		t.Fatalf("chunked body: %d %q", code, body)
	}
	// An IPv6 literal that an allowed name resolved to (its AAAA was asked
	// with the A), in brackets, judged by its address and then its SNI.
	tc := connectTunnel(t, addr, "[2001:2::10]:443")
	if body, err := w.httpsGet(tc, "api.allowed.test"); err != nil || body != "host=api.allowed.test" {
		t.Fatalf("CONNECT to an IPv6 literal: %q, %v", body, err)
	}
	if l := ds.all(); len(l) != 1 || !strings.Contains(l[0].Reason, "rebinding") {
		t.Fatalf("denials: %v", l)
	}
	if s := e.Stats(); s.Allowed[KindTCP] != 6 || s.Allowed[KindSNI] != 3 || s.Allowed[KindHost] != 3 {
		t.Fatalf("stats: %+v", s)
	}

	// curl, the way a sandboxed program uses the proxy variables.
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, w.caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"https://api.allowed.test/", "http://other.allowed.test/"} {
		cmd := exec.Command("curl", "-sS", "--max-time", "10", "--cacert", ca, u)
		cmd.Env = append(noProxyEnv(), "HTTPS_PROXY=http://"+addr, "http_proxy=http://"+addr)
		out, err := cmd.CombinedOutput()
		host := strings.TrimSuffix(strings.SplitN(u, "/", 4)[2], "/")
		if err != nil || string(out) != "host="+host {
			t.Fatalf("curl %s: %q, %v", u, out, err)
		}
	}
	cmd := exec.Command("curl", "-s", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_connect}", "--cacert", ca, "-x", "http://"+addr, "https://blocked.test/")
	cmd.Env = noProxyEnv()
	out, _ := cmd.Output()
	if string(out) != "403" {
		t.Fatalf("curl to a refused name: %q, want the proxy's 403", out)
	}
}

func TestProxyRefusals(t *testing.T) {
	w := needWorld(t)
	e, ds := w.newEngine(t, filtered("*.allowed.test"), Options{})
	addr, _ := startProxy(t, e)
	c := w.proxyClient(t, addr)

	start := time.Now()
	code, body := rawProxy(t, addr, "CONNECT blocked.test:443 HTTP/1.1\r\nHost: blocked.test:443\r\n\r\n")
	if code != 403 || !strings.Contains(body, "--allow-domain blocked.test") || strings.Count(body, "\n") != 1 {
		t.Fatalf("refused name: %d %q", code, body)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the refusal took %v", d)
	}
	if d := ds.last(t); d.Kind != KindDNS || d.Name != "blocked.test" || d.Allow != "--allow-domain blocked.test" {
		t.Fatalf("denial: %+v", d)
	}
	if code, body, _ := get(c, "http://blocked.test/x"); code != 403 || !strings.Contains(body, "--allow-domain blocked.test") {
		t.Fatalf("refused name over plain HTTP: %d %q", code, body)
	}
	if _, _, err := get(c, "https://blocked.test/"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("Go client through a refused CONNECT: %v", err)
	}

	for _, tc := range []struct {
		req, kind, want string
	}{
		// Metadata, by IP literal in every spelling.
		{"CONNECT 169.254.169.254:80", KindTCP, reasonMetadata},
		{"CONNECT [::ffff:169.254.169.254]:80", KindTCP, reasonMetadata},
		{"CONNECT [fd00:ec2::254]:80", KindTCP, reasonMetadata},
		{"GET http://169.254.169.254/latest/meta-data/", KindTCP, reasonMetadata},
		{"CONNECT metadata.google.internal:80", KindDNS, "block list"},
		{"CONNECT 127.0.0.1:" + fmt.Sprint(w.loopback.Port()), KindTCP, reasonLoopback},
		// An address no allowed name resolved to.
		{"CONNECT 198.18.0.20:443", KindTCP, "--allow-cidr 198.18.0.20/32"},
		// Allowed names that resolve to refused addresses (rebinding).
		{"CONNECT rebind-md.allowed.test:443", KindDNS, "rebinding"},
		{"GET http://rebind-lo.allowed.test/", KindDNS, "rebinding"},
		{"CONNECT rebind-host.allowed.test:443", KindDNS, "rebinding"},
		{"CONNECT mapped.allowed.test:443", KindDNS, "rebinding"},
	} {
		code, body := rawProxy(t, addr, tc.req+" HTTP/1.1\r\n\r\n")
		if code != 403 || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %q, want 403 with %q", tc.req, code, body, tc.want)
			continue
		}
		if d := ds.last(t); d.Kind != tc.kind {
			t.Errorf("%s: denial %+v, want kind %s", tc.req, d, tc.kind)
		}
	}
	// The Host header must name the URL's host.
	code, body = rawProxy(t, addr, "GET http://api.allowed.test/ HTTP/1.1\r\nHost: blocked.test\r\n\r\n")
	if code != 403 || !strings.Contains(body, "Host") {
		t.Fatalf("Host mismatch: %d %q", code, body)
	}
	if d := ds.last(t); d.Kind != KindHost || d.Name != "blocked.test" {
		t.Fatalf("denial: %+v", d)
	}
	// A name that does not exist, a port where nobody listens: 502.
	if code, body := rawProxy(t, addr, "CONNECT nx.allowed.test:443 HTTP/1.1\r\n\r\n"); code != 502 {
		t.Fatalf("unknown name: %d %q", code, body)
	}
	if code, body := rawProxy(t, addr, "CONNECT api.allowed.test:81 HTTP/1.1\r\n\r\n"); code != 502 || !strings.Contains(body, "api.allowed.test") {
		t.Fatalf("closed port: %d %q", code, body)
	}
	var targets []string
	for _, d := range e.Denials() {
		targets = append(targets, d.Target)
	}
	for _, s := range []string{"blocked.test", "169.254.169.254", "rebind-md.allowed.test", "rebind-lo.allowed.test"} {
		if !slices.Contains(targets, s) {
			t.Errorf("denials %q lack %q", targets, s)
		}
	}
	if sum := e.Summary(); !strings.Contains(sum, "blocked.test (") || !strings.Contains(sum, "[--allow-domain blocked.test]") {
		t.Errorf("summary: %q", sum)
	}

	// Full mode: only the block list and the address classes count.
	ef, dsf := w.newEngine(t, full("blocked.test"), Options{})
	faddr, _ := startProxy(t, ef)
	fc := w.proxyClient(t, faddr)
	if code, body, err := get(fc, "https://other.allowed.test/"); err != nil || code != 200 || body != "host=other.allowed.test" {
		t.Fatalf("full mode: %d %q %v", code, body, err)
	}
	if code, body := rawProxy(t, faddr, "CONNECT 198.18.0.20:443 HTTP/1.1\r\n\r\n"); code != 200 {
		t.Fatalf("full mode, an unnamed address: %d %q", code, body)
	}
	if code, body := rawProxy(t, faddr, "CONNECT blocked.test:443 HTTP/1.1\r\n\r\n"); code != 403 || strings.Contains(body, "allow with") {
		t.Fatalf("full mode, a blocked name: %d %q", code, body)
	}
	if d := dsf.last(t); d.Kind != KindDNS || d.Allow != "" {
		t.Fatalf("denial: %+v", d)
	}
	if code, _ := rawProxy(t, faddr, "CONNECT rebind-md.allowed.test:80 HTTP/1.1\r\n\r\n"); code != 403 {
		t.Fatalf("full mode, rebinding to metadata: %d", code)
	}

	// Mode none: nothing.
	en, _ := w.newEngine(t, sandbox.Network{Mode: sandbox.NetworkNone}, Options{})
	naddr, _ := startProxy(t, en)
	if code, body := rawProxy(t, naddr, "CONNECT api.allowed.test:443 HTTP/1.1\r\n\r\n"); code != 403 || !strings.Contains(body, "network access is off") {
		t.Fatalf("mode none: %d %q", code, body)
	}
}

func TestProxySNIMismatch(t *testing.T) {
	w := needWorld(t)
	e, ds := w.newEngine(t, filtered("*.allowed.test"), Options{})
	addr, _ := startProxy(t, e)

	// A tunnel asked for one allowed name, used for another.
	c := connectTunnel(t, addr, "api.allowed.test:443")
	if body, err := w.httpsGet(c, "other.allowed.test"); err == nil {
		t.Fatalf("another name's SNI through a tunnel: %q", body)
	}
	if d := ds.last(t); d.Kind != KindSNI || d.Name != "other.allowed.test" {
		t.Fatalf("denial: %+v", d)
	}
	// Plain HTTP in a tunnel, with another Host.
	c = connectTunnel(t, addr, "api.allowed.test:80")
	if body, err := httpGet(c, "blocked.test"); err == nil {
		t.Fatalf("another Host through a tunnel: %q", body)
	}
	if d := ds.last(t); d.Kind != KindHost || d.Name != "blocked.test" {
		t.Fatalf("denial: %+v", d)
	}
	// The same name, and the ClientHello sent along with the CONNECT, in
	// one write.
	c = connectTunnel(t, addr, "API.allowed.test:443")
	if body, err := w.httpsGet(c, "api.allowed.test"); err != nil || body != "host=api.allowed.test" {
		t.Fatalf("the right SNI: %q, %v", body, err)
	}
	before := e.Stats().Denied[KindSNI]
	pc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	pc.SetDeadline(time.Now().Add(15 * time.Second))
	hello := clientHello(t, "other.allowed.test")
	pc.Write(append([]byte("CONNECT api.allowed.test:443 HTTP/1.1\r\n\r\n"), hello...))
	br := bufio.NewReader(pc)
	if resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT with a ClientHello behind it: %v", err)
	}
	if n, _ := br.Read(make([]byte, 10)); n != 0 {
		t.Fatal("a ClientHello sent with the CONNECT got an answer")
	}
	if n := e.Stats().Denied[KindSNI]; n != before+1 {
		t.Fatalf("SNI refusals: %d, want %d", n, before+1)
	}
	// An IP literal: its SNI must have resolved to it.
	c = connectTunnel(t, addr, "198.18.0.10:443")
	if _, err := w.httpsGet(c, "other.allowed.test"); err == nil {
		t.Fatal("IP literal tunnel with a name that resolved elsewhere")
	}
}

func TestProxyMalformed(t *testing.T) {
	w := needWorld(t)
	e, ds := w.newEngine(t, filtered("*.allowed.test"), Options{})
	addr, _ := startProxy(t, e)
	for _, raw := range []string{
		"GET / HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\n\r\n",
		"CONNECT api.allowed.test HTTP/1.1\r\n\r\n",
		"CONNECT api.allowed.test:0 HTTP/1.1\r\n\r\n",
		"CONNECT api.allowed.test:70000 HTTP/1.1\r\n\r\n",
		"CONNECT api.allowed.test:+443 HTTP/1.1\r\n\r\n",
		"CONNECT 2001:2::10:443 HTTP/1.1\r\n\r\n",
		"CONNECT [2001:2::10:443 HTTP/1.1\r\n\r\n",
		"CONNECT [fe80::1%25lo]:443 HTTP/1.1\r\n\r\n",
		"CONNECT [198.18.0.10]:443 HTTP/1.1\r\n\r\n",
		"CONNECT http://api.allowed.test/ HTTP/1.1\r\n\r\n",
		"CONNECT 127.1:443 HTTP/1.1\r\n\r\n",
		"CONNECT 0x7f000001:443 HTTP/1.1\r\n\r\n",
		"CONNECT a..b:443 HTTP/1.1\r\n\r\n",
		"GET https://api.allowed.test/ HTTP/1.1\r\n\r\n",
		"GET ftp://api.allowed.test/ HTTP/1.1\r\n\r\n",
		"GET http://user:pw@api.allowed.test/ HTTP/1.1\r\n\r\n",
		"GET http://api.allowed.test/#x HTTP/1.1\r\n\r\n",
		"GET http:/// HTTP/1.1\r\n\r\n",
		"GET http://api.allowed.test/ HTTP/2.0\r\n\r\n",
		"GET  http://api.allowed.test/ HTTP/1.1\r\n\r\n",
		"GET http://api.allowed.test/ HTTP/1.1 x\r\n\r\n",
		"G(T http://api.allowed.test/ HTTP/1.1\r\n\r\n",
		"GET http://api.allowed.test/ HTTP/1.1\r\nHost: api.allowed.test\r\nHost: api.allowed.test\r\n\r\n",
		"GET http://api.allowed.test/ HTTP/1.1\r\nHost: bad host\r\n\r\n",
		"POST http://api.allowed.test/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST http://api.allowed.test/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
		"POST http://api.allowed.test/ HTTP/1.1\r\nContent-Length: -3\r\n\r\n",
		"POST http://api.allowed.test/ HTTP/1.1\r\nContent-Length: 0x3\r\n\r\n",
		"POST http://api.allowed.test/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"POST http://api.allowed.test/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET http://api.allowed.test/ HTTP/1.1\r\nX-A: 1\r\n folded\r\n\r\n",
		"GET http://api.allowed.test/ HTTP/1.1\r\nX A: 1\r\n\r\n",
		"GET http://api.allowed.test/ HTTP/1.1\r\nnocolon\r\n\r\n",
		"GET http://api.allowed.test/ HTTP/1.1\r\nX-A: 1\x00\r\n\r\n",
		"GET http://api.allowed.test/ HTTP/1.1\r\nX-A: a\rb\r\n\r\n",
		"GET http://api.allowed.test/ HTTP/1.1\r\nX-A: 1\r\n",
	} {
		start := time.Now()
		code, body := rawProxy(t, addr, raw)
		if code != 400 || !strings.HasSuffix(body, "\n") || strings.Count(body, "\n") != 1 {
			t.Errorf("%q: %d %q, want 400 with a line", raw, code, body)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%q: the answer took %v", raw, d)
		}
	}
	// The last one ended without its empty line; a head over the limit is
	// 431, whether in one line or in many.
	if code, _ := rawProxy(t, addr, "GET http://api.allowed.test/"+strings.Repeat("a", maxProxyHead)+" HTTP/1.1\r\n\r\n"); code != 431 {
		t.Errorf("long request line: %d", code)
	}
	if code, _ := rawProxy(t, addr, "GET http://api.allowed.test/ HTTP/1.1\r\n"+strings.Repeat("X-A: "+strings.Repeat("a", 1000)+"\r\n", maxProxyHead/1000+1)+"\r\n"); code != 431 {
		t.Errorf("long head: %d", code)
	}
	if code, _ := rawProxy(t, addr, "GET http://api.allowed.test/ HTTP/1.1\r\n"+strings.Repeat("X-A: 1\r\n", maxProxyHeaders+1)+"\r\n"); code != 400 {
		t.Errorf("too many headers: %d", code)
	}
	if l := ds.all(); len(l) != 0 {
		t.Fatalf("malformed requests were reported as refusals: %v", l)
	}
	// The proxy still works.
	if code, body := rawProxy(t, addr, "GET http://api.allowed.test/ HTTP/1.1\r\n\r\n"); code != 200 || body != "host=api.allowed.test" {
		t.Fatalf("after the malformed requests: %d %q", code, body)
	}
}

func TestProxySlowloris(t *testing.T) {
	w := needWorld(t)
	e, _ := w.newEngine(t, filtered("*.allowed.test"), Options{})
	e.headTimeout = 500 * time.Millisecond
	addr, _ := startProxy(t, e)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	// A byte at a time, never finishing the head: the time limit is for
	// the whole head, not for each read.
	go func() {
		for _, b := range []byte("CONNECT api.allowed.test:443 HTTP/1.1\r\nX-Slow: ") {
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a slow head: %v", err)
	}
	if resp.StatusCode != 408 {
		t.Fatalf("slow head: %s", resp.Status)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the slow head was cut after %v", d)
	}
	// A client that says nothing at all is also cut off.
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(c2), nil); err != nil || resp.StatusCode != 408 {
		t.Fatalf("silent client: %v", err)
	}
}

func TestProxyChainingHonoured(t *testing.T) {
	w := needWorld(t)
	env := map[string]string{"HTTPS_PROXY": "http://user:p%40ss@198.18.0.30:3128"}
	d, err := NewHostDialer(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	e, _ := w.newEngine(t, filtered("*.allowed.test"), Options{Dialer: d})
	addr, _ := startProxy(t, e)
	c := w.proxyClient(t, addr)
	if code, body, err := get(c, "https://api.allowed.test/"); err != nil || code != 200 || body != "host=api.allowed.test" {
		t.Fatalf("through both proxies: %d %q %v", code, body, err)
	}
	got := w.proxied()
	if len(got) == 0 || got[len(got)-1] != "api.allowed.test:443 Basic dXNlcjpwQHNz" {
		t.Fatalf("the upstream proxy was asked for %q", got)
	}
}

func TestProxyCloseEndsEverything(t *testing.T) {
	w := needWorld(t)
	e, _ := w.newEngine(t, full(), Options{MaxConns: 4})
	runtime.GC()
	before := runtime.NumGoroutine()
	addr, done := startProxy(t, e)

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	partial, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer partial.Close()
	partial.Write([]byte("CONNECT api.allowed.test:22 HTTP/1.1\r\n"))
	tunnel := connectTunnel(t, addr, "api.allowed.test:22")
	buf := make([]byte, 64)
	if n, err := tunnel.Read(buf); err != nil || string(buf[:n]) != "SSH-2.0-test\r\n" {
		t.Fatalf("banner through the tunnel: %q, %v", buf[:n], err)
	}
	if s := e.Stats(); s.Conns != 1 {
		t.Fatalf("conns: %d", s.Conns)
	}
	// Over MaxConns client connections: a 503 at once.
	fifth, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fifth.Close()
	sixth, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer sixth.Close()
	sixth.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(sixth), nil); err != nil || resp.StatusCode != 503 {
		t.Fatalf("a client over MaxConns: %v", err)
	}

	e.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ServeProxy after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeProxy did not return after Close")
	}
	for name, c := range map[string]net.Conn{"idle": idle, "partial": partial, "tunnel": tunnel, "fifth": fifth} {
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.ReadAll(c); err != nil && isTimeout(err) {
			t.Errorf("the %s connection outlived Close", name)
		}
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("the listener outlived Close")
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		b := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after Close:\n%s", before, n, b[:runtime.Stack(b, true)])
	}
	if s := e.Stats(); s.Conns != 0 {
		t.Fatalf("conns after Close: %d", s.Conns)
	}
	// ServeProxy on a closed engine returns at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ServeProxy(ln); err != nil {
		t.Fatal(err)
	}
	if _, err := ln.Accept(); err == nil {
		t.Fatal("the listener given to a closed engine stays open")
	}
}

// A listener closed by its owner ends its connections too.
func TestProxyListenerClosed(t *testing.T) {
	w := needWorld(t)
	e, _ := w.newEngine(t, full(), Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.ServeProxy(ln) }()
	tunnel := connectTunnel(t, ln.Addr().String(), "api.allowed.test:22")
	ln.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeProxy did not return after its listener closed")
	}
	tunnel.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadAll(tunnel); err != nil && isTimeout(err) {
		t.Fatal("the tunnel outlived its listener")
	}
}

package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/mcp"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

const runBody = `{"command":["sh","-c","touch /workspace/pwned"],"profile":"permissive"}`

// syncBuf is a log sink read while handlers write.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// guardServer has one key, one allowed origin and an access log.
func guardServer(t *testing.T, o Options) (*Server, *syncBuf) {
	t.Helper()
	log := &syncBuf{}
	o.Manager = sandbox.NewManager(sandbox.ManagerOptions{})
	o.Resolve = func(context.Context, RunSpec) (*sandbox.Spec, error) { return nil, errors.New("refused") }
	o.Logger = slog.New(slog.NewTextHandler(log, nil))
	if o.Keys == nil && !o.InsecureNoAuth {
		o.Keys = []string{"k"}
	}
	return New(o), log
}

// TestGuardRules: every rule before routing, in its order, on the
// handler (no connection information: a TCP client of unknown address).
func TestGuardRules(t *testing.T) {
	s, log := guardServer(t, Options{AllowedOrigins: []string{"http://App.example:3000/"}})
	const key = "Bearer k"
	for _, tc := range []struct {
		what         string
		method, path string
		body         string
		hdr          []string
		code         int
		msg          string // prefix of the error
	}{
		// Content-Type: what a page can send without a preflight.
		{"text/plain POST (no-cors fetch, text/plain form)", "POST", "/run", runBody, []string{"Content-Type", "text/plain"}, 415, `Unsupported Content-Type "text/plain"`},
		{"text/plain with charset", "POST", "/run", runBody, []string{"Content-Type", "text/plain;charset=UTF-8", "Authorization", key}, 415, "Unsupported Content-Type"},
		{"urlencoded form", "POST", "/run", "a=" + runBody, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "Unsupported Content-Type"},
		{"multipart form", "POST", "/run", "--x\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n" + runBody + "\r\n--x--\r\n", []string{"Content-Type", "multipart/form-data; boundary=x"}, 415, "Unsupported Content-Type"},
		{"body without Content-Type", "POST", "/run", runBody, []string{"Content-Type", "", "Authorization", key}, 415, "Missing Content-Type"},
		{"malformed Content-Type", "POST", "/run", runBody, []string{"Content-Type", "application/json; =", "Authorization", key}, 415, "Unsupported Content-Type"},
		{"application/json passes (resolver refuses: 400)", "POST", "/run", runBody, []string{"Authorization", key}, 400, "refused"},
		{"media type case-insensitive, charset allowed", "POST", "/run", runBody, []string{"Content-Type", "Application/JSON; charset=utf-8", "Authorization", key}, 400, "refused"},
		{"GET with Content-Type json and no body (Go SDK)", "GET", "/status", "", []string{"Content-Type", "application/json", "Authorization", key}, 200, ""},
		{"bodiless POST without Content-Type (start)", "POST", "/sandboxes/x/start", "", []string{"Authorization", key}, 501, ""},

		// Origin.
		{"foreign Origin", "POST", "/run", runBody, []string{"Origin", "http://evil.example", "Authorization", key}, 403, `Forbidden: requests from web pages are refused (Origin "http://evil.example")`},
		{"foreign Origin on GET /health", "GET", "/health", "", []string{"Origin", "http://evil.example"}, 403, "Forbidden: requests from web pages"},
		{"Origin null (sandboxed frame, file:)", "POST", "/run", runBody, []string{"Origin", "null", "Authorization", key}, 403, `Forbidden: requests from web pages are refused (Origin "null")`},
		{"Origin before Content-Type", "POST", "/run", runBody, []string{"Origin", "http://evil.example", "Content-Type", "text/plain"}, 403, "Forbidden: requests from web pages"},
		{"allowed Origin, right key", "GET", "/status", "", []string{"Origin", "http://app.example:3000", "Authorization", key}, 200, ""},
		{"allowed Origin still needs the key", "GET", "/status", "", []string{"Origin", "http://app.example:3000"}, 401, "Missing Authorization header"},
		{"allowed Origin still needs JSON", "POST", "/run", runBody, []string{"Origin", "http://app.example:3000", "Content-Type", "text/plain", "Authorization", key}, 415, ""},
		{"allowed Origin's other port", "GET", "/status", "", []string{"Origin", "http://app.example:3001", "Authorization", key}, 403, ""},
		{"preflight from a foreign Origin", "OPTIONS", "/run", "", []string{"Origin", "http://evil.example", "Access-Control-Request-Method", "POST"}, 403, ""},

		// Host (DNS rebinding).
		{"rebinding Host", "POST", "/run", runBody, []string{"Host", "evil.example:18888", "Authorization", key}, 403, `Forbidden: Host "evil.example:18888" is not a name of this server (DNS rebinding protection); to allow it start the server with --allowed-host evil.example`},
		{"Host that starts like an IP", "GET", "/status", "", []string{"Host", "127.0.0.1.evil.example", "Authorization", key}, 403, "Forbidden: Host"},
		{"Host 0.0.0.0", "GET", "/status", "", []string{"Host", "0.0.0.0:18888", "Authorization", key}, 403, "Forbidden: Host"},
		{"Host before everything", "POST", "/run", runBody, []string{"Host", "evil.example", "Origin", "http://evil.example", "Content-Type", "text/plain"}, 403, "Forbidden: Host"},
		{"empty Host", "GET", "/health", "", []string{"Host", ""}, 403, "Forbidden: missing or malformed Host"},
		{"malformed Host", "GET", "/health", "", []string{"Host", "[::1"}, 403, "Forbidden: missing or malformed Host"},
		{"IPv6 loopback", "GET", "/status", "", []string{"Host", "[::1]:18888", "Authorization", key}, 200, ""},
		{"IPv4-mapped loopback", "GET", "/status", "", []string{"Host", "[::ffff:127.0.0.1]:18888", "Authorization", key}, 200, ""},
		{"127.0.0.2", "GET", "/status", "", []string{"Host", "127.0.0.2", "Authorization", key}, 200, ""},
		{"localhost", "GET", "/status", "", []string{"Host", "LocalHost:18888", "Authorization", key}, 200, ""},
		{"*.localhost", "GET", "/status", "", []string{"Host", "app.localhost.", "Authorization", key}, 200, ""},
		{"bound address is unknown here", "GET", "/status", "", []string{"Host", "192.0.2.7:18888", "Authorization", key}, 403, "Forbidden: Host"},

		// The key.
		{"no key", "GET", "/status", "", nil, 401, "Missing Authorization header"},
		{"wrong key", "POST", "/run", runBody, []string{"Authorization", "Bearer nope"}, 401, "Invalid API key"},
		{"right key", "GET", "/status", "", []string{"Authorization", key}, 200, ""},
		{"health needs no key", "GET", "/health", "", nil, 200, ""},
	} {
		code, env, _ := doH(s, tc.method, tc.path, tc.body, tc.hdr...)
		msg, _ := env["error"].(string)
		if code != tc.code || !strings.HasPrefix(msg, tc.msg) {
			t.Errorf("%s: %d %q, want %d %q…", tc.what, code, msg, tc.code, tc.msg)
		}
		if code >= 400 && env["success"] != false {
			t.Errorf("%s: not the error envelope: %v", tc.what, env)
		}
	}

	// Every refusal is in the access log and the metrics.
	code, _ := do(s, "GET", "/metrics", "", "Authorization", key)
	if code != 200 {
		t.Fatalf("metrics: %d", code)
	}
	w := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Host, req.Header["Authorization"] = "localhost", []string{key}
	s.ServeHTTP(w, req)
	for _, want := range []string{
		`agentkernel_http_requests_total{code="403",route="forbidden_host"} 7`,
		`agentkernel_http_requests_total{code="403",route="forbidden_origin"} 6`,
		`agentkernel_http_requests_total{code="415",route="unsupported_media_type"} 7`,
		`agentkernel_http_requests_total{code="401",route="unauthorized"} 3`,
	} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, w.Body.String())
		}
	}
	for _, want := range []string{
		`route=forbidden_host status=403`, `host=evil.example:18888`,
		`route=forbidden_origin status=403`, `origin=http://evil.example`, `origin=null`,
		`route=unsupported_media_type status=415`, `content_type=text/plain`,
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("access log lacks %q:\n%s", want, log.String())
		}
	}
	if strings.Contains(log.String(), "Bearer") {
		t.Errorf("the access log holds a key:\n%s", log.String())
	}
}

// TestChunkedBody: a body of unknown length (chunked) is a body too.
func TestChunkedBody(t *testing.T) {
	s, _ := guardServer(t, Options{})
	for ct, want := range map[string]int{"text/plain": 415, "": 415, "application/json": 400} {
		req := httptest.NewRequest("POST", "/run", strings.NewReader(runBody))
		req.Host, req.ContentLength, req.TransferEncoding = "localhost", -1, []string{"chunked"}
		req.Header.Set("Authorization", "Bearer k")
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		if w.Code != want {
			t.Errorf("chunked body, Content-Type %q: %d, want %d", ct, w.Code, want)
		}
	}
}

// TestCORS: an allowed origin gets its preflight and ACAO; others get
// neither.
func TestCORS(t *testing.T) {
	s, _ := guardServer(t, Options{AllowedOrigins: []string{"http://app.example:3000"}})
	code, _, h := doH(s, "OPTIONS", "/run", "", "Origin", "http://app.example:3000",
		"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization,content-type",
		"Access-Control-Request-Private-Network", "true")
	if code != 204 {
		t.Fatalf("preflight: %d", code)
	}
	if h.Get("Access-Control-Allow-Origin") != "http://app.example:3000" || h.Get("Access-Control-Allow-Private-Network") != "true" ||
		!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "DELETE") {
		t.Errorf("preflight headers: %v", h)
	}
	for _, want := range []string{"Authorization", "Content-Type"} {
		if !strings.Contains(h.Get("Access-Control-Allow-Headers"), want) {
			t.Errorf("Access-Control-Allow-Headers lacks %s: %v", want, h)
		}
	}
	code, _, h = doH(s, "GET", "/status", "", "Origin", "http://app.example:3000", "Authorization", "Bearer k")
	if code != 200 || h.Get("Access-Control-Allow-Origin") != "http://app.example:3000" || h.Get("Vary") != "Origin" {
		t.Errorf("allowed origin: %d %v", code, h)
	}
	code, _, h = doH(s, "OPTIONS", "/run", "", "Origin", "http://evil.example", "Access-Control-Request-Method", "POST")
	if code != 403 || h.Get("Access-Control-Allow-Origin") != "" || h.Get("Access-Control-Allow-Methods") != "" {
		t.Errorf("foreign preflight: %d %v", code, h)
	}
	code, _, h = doH(s, "GET", "/status", "", "Authorization", "Bearer k")
	if code != 200 || h.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("no Origin, yet CORS headers: %v", h)
	}
	// Two Origin headers are refused even if one is allowed.
	req := httptest.NewRequest("GET", "/status", nil)
	req.Host = "localhost"
	req.Header["Origin"] = []string{"http://app.example:3000", "http://evil.example"}
	req.Header.Set("Authorization", "Bearer k")
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	if w.Code != 403 {
		t.Errorf("two Origins: %d", w.Code)
	}
}

// TestAllowedHosts: names the user allowed, case-insensitively; "*".
func TestAllowedHosts(t *testing.T) {
	s, _ := guardServer(t, Options{AllowedHosts: []string{"MyBox.lan", "[fd00::1]"}})
	for host, want := range map[string]int{"mybox.lan:18888": 200, "MYBOX.LAN": 200, "[fd00::1]:1": 200, "other.lan": 403, "mybox.lan.evil.example": 403} {
		if code, env := do(s, "GET", "/status", "", "Host", host, "Authorization", "Bearer k"); code != want {
			t.Errorf("Host %s: %d %v, want %d", host, code, env, want)
		}
	}
	any, _ := guardServer(t, Options{AllowedHosts: []string{"*"}})
	if code, _ := do(any, "GET", "/status", "", "Host", "evil.example", "Authorization", "Bearer k"); code != 200 {
		t.Errorf("allowed hosts *: %d", code)
	}
}

// TestNoKeyNoAuth: without keys, TCP requests need InsecureNoAuth.
func TestNoKeyNoAuth(t *testing.T) {
	s := New(Options{Manager: sandbox.NewManager(sandbox.ManagerOptions{})})
	if code, env := do(s, "GET", "/status", ""); code != 401 {
		t.Errorf("no keys, not insecure: %d %v", code, env)
	}
	s = New(Options{Manager: sandbox.NewManager(sandbox.ManagerOptions{}), InsecureNoAuth: true})
	code, env := do(s, "GET", "/status", "")
	if data, _ := env["data"].(map[string]any); code != 200 || data["api_key_configured"] != false {
		t.Errorf("insecure: %d %v", code, env)
	}
	// Insecure still refuses browsers.
	if code, _ := do(s, "POST", "/run", runBody, "Content-Type", "text/plain"); code != 415 {
		t.Errorf("insecure, text/plain: %d", code)
	}
	if code, _ := do(s, "GET", "/status", "", "Host", "evil.example"); code != 403 {
		t.Errorf("insecure, rebinding: %d", code)
	}
}

// TestMCPBehindGuard: /mcp (the real MCP handler) gets the same checks.
func TestMCPBehindGuard(t *testing.T) {
	m := sandbox.NewManager(sandbox.ManagerOptions{})
	s, _ := guardServer(t, Options{MCP: mcp.Handler(mcp.NewServer(mcp.Options{Manager: m, Dir: t.TempDir(), Version: "test"}), nil)})
	const init = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	accept := "application/json, text/event-stream"
	for _, tc := range []struct {
		what string
		hdr  []string
		code int
	}{
		{"text/plain", []string{"Content-Type", "text/plain", "Authorization", "Bearer k", "Accept", accept}, 415},
		{"urlencoded", []string{"Content-Type", "application/x-www-form-urlencoded", "Authorization", "Bearer k", "Accept", accept}, 415},
		{"foreign Origin", []string{"Origin", "http://evil.example", "Authorization", "Bearer k", "Accept", accept}, 403},
		{"rebinding Host", []string{"Host", "evil.example", "Authorization", "Bearer k", "Accept", accept}, 403},
		{"no key", []string{"Accept", accept}, 401},
		{"wrong key", []string{"Authorization", "Bearer x", "Accept", accept}, 401},
		{"right key", []string{"Authorization", "Bearer k", "Accept", accept}, 200},
	} {
		if code, _ := do(s, "POST", "/mcp", init, tc.hdr...); code != tc.code {
			t.Errorf("/mcp %s: %d, want %d", tc.what, code, tc.code)
		}
	}
}

// served starts s on real listeners and returns them; it stops at the
// end of the test.
func served(t *testing.T, s *Server, lns ...net.Listener) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lns, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

// get sends GET path through dial with the given Host and headers.
func get(t *testing.T, dial func() (net.Conn, error), host, path string, hdr ...string) (int, string) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) { return dial() }}}
	req, _ := http.NewRequest("GET", "http://x"+path, nil)
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s (Host %s): %v", path, host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeUnixSocket: on a unix socket the server's own user needs no
// key, a peer of another uid is refused even with the key; the other
// rules still apply. The peer's uid is the kernel's (SO_PEERCRED); the
// other user is simulated by a server that believes it runs as another
// uid (a real second user is in test/e2e).
func TestServeUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "akapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s, log := guardServer(t, Options{})
	served(t, s, ln)
	dial := func() (net.Conn, error) { return net.Dial("unix", sock) }
	if code, body := get(t, dial, "agentkernel", "/status"); code != 200 || !strings.Contains(body, `"api_key_configured":true`) {
		t.Errorf("same uid, no key: %d %s", code, body)
	}
	if code, _ := get(t, dial, "evil.example", "/status"); code != 200 {
		t.Errorf("unix socket, any Host: %d", code)
	}
	if code, _ := get(t, dial, "agentkernel", "/status", "Origin", "http://evil.example"); code != 403 {
		t.Errorf("unix socket, foreign Origin: %d", code)
	}
	// (A request's access log line is written after its answer.)
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(log.String(), "remote=\"unix uid="); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("access log does not name the unix peer:\n%s", log.String())
			break
		}
	}

	sock2 := filepath.Join(dir, "s2")
	ln2, err := net.Listen("unix", sock2)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := guardServer(t, Options{})
	other.uid = os.Geteuid() + 1
	served(t, other, ln2)
	dial2 := func() (net.Conn, error) { return net.Dial("unix", sock2) }
	for _, auth := range []string{"", "Bearer k"} {
		code, body := get(t, dial2, "agentkernel", "/health", "Authorization", auth)
		if code != 403 || !strings.Contains(body, "serves only its owner") {
			t.Errorf("another uid (auth %q): %d %s", auth, code, body)
		}
	}
}

// FuzzHost: whatever the Host header, a server that allows no extra
// names accepts it only if it names localhost (or *.localhost) or a
// loopback address; never a panic.
func FuzzHost(f *testing.F) {
	for _, h := range []string{"localhost", "127.0.0.1:18888", "[::1]:1", "evil.example", "127.0.0.1.evil.example", "[::ffff:127.0.0.1]", "localhost.:80", "[::1", "a:b:c", "0x7f.1", "2130706433", "LOCALHOST", "x.localhost"} {
		f.Add(h)
	}
	s := New(Options{Manager: sandbox.NewManager(sandbox.ManagerOptions{})})
	f.Fuzz(func(t *testing.T, host string) {
		if !s.hostAllowed(host, &connInfo{peerUID: -1}) {
			return
		}
		h := hostOnly(host)
		if h == "localhost" || strings.HasSuffix(h, ".localhost") {
			return
		}
		ip, err := netip.ParseAddr(h)
		if err != nil || !ip.Unmap().IsLoopback() {
			t.Fatalf("Host %q (%q) accepted", host, h)
		}
	})
}

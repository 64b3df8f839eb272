package api

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestRouterOddPaths: the route table answers odd paths as the contract
// says, never with ServeMux's own text 404/405 or a redirect: empty
// segments are ignored, another method on a known path is the JSON 404,
// "." and ".." reach the handlers (which refuse ".." in a file's path,
// however it was escaped), and every answer is the envelope.
func TestRouterOddPaths(t *testing.T) {
	s := testServer("k")
	for _, tc := range []struct {
		method, path string
		code         int
		msg          string
	}{
		{"GET", "/health", 200, ""},
		{"HEAD", "/health", 200, ""},
		{"GET", "//health//", 200, ""},
		{"GET", "/", 404, "Not found"},
		{"GET", "/./health", 404, "Not found"},
		{"GET", "/health/..", 404, "Not found"},
		{"GET", "/health/x", 404, "Not found"},
		{"POST", "/health", 404, "Not found"},
		{"PUT", "/run", 404, "Not found"},
		{"GET", "/run/stream", 404, "Not found"},
		{"DELETE", "/sandboxes", 404, "Not found"},
		{"POST", "/sandboxes/x", 404, "Not found"},
		{"GET", "/sandboxes/x/exec", 404, "Not found"},
		{"POST", "/sandboxes/x/nope", 404, "Not found"},
		{"POST", "/sandboxes/x/start/y", 404, "Not found"},
		{"GET", "/sandboxes/x/files", 404, "Not found"},
		{"GET", "/sandboxes/x/files/", 404, "Not found"},
		{"DELETE", "/sandboxes/x/files", 404, "Not found"},
		{"GET", "/sandboxes/x%2Fy", 404, "Not found"},
		{"GET", "/mcp", 404, "Not found"},
		{"OPTIONS", "*", 404, "Not found"},
		{"GET", "/sandboxes//x", 501, ""},
		{"GET", "/sandboxes/x/", 501, ""},
		{"GET", "/sandboxes/..", 400, ""},
		{"GET", "/sandboxes/%2e%2e", 400, ""},
		{"GET", "/sandboxes/-x-/logs", 400, ""},
		{"GET", "/sandboxes/x/files/tmp/../../etc/shadow", 400, "Invalid path: '..' is not allowed"},
		{"GET", "/sandboxes/x/files/tmp/%2e%2e/etc", 400, "Invalid path: '..' is not allowed"},
		{"PUT", "/sandboxes/x/files/tmp%2F..%2Fetc", 400, "Invalid path: '..' is not allowed"},
		{"DELETE", "/sandboxes/x/files/%2Fproc/1", 400, "Invalid path: access to /proc is not allowed"},
		{"GET", "/sandboxes/x/files/./pr%6Fc/1", 400, "Invalid path: access to /proc is not allowed"},
		{"GET", "/sandboxes/x/files/tmp/./a", 501, ""},
		{"GET", "/sandboxes/x/files/tmp/%25zz", 501, ""},
	} {
		body := ""
		if tc.method == "PUT" || tc.method == "POST" {
			body = "{}"
		}
		code, env, hdr := doH(s, tc.method, tc.path, body, "Authorization", "Bearer k")
		msg, _ := env["error"].(string)
		if code != tc.code || (tc.msg != "" && msg != tc.msg) {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.path, code, msg, tc.code, tc.msg)
		}
		if tc.method != "HEAD" && (hdr.Get("Content-Type") != "application/json" || env["success"] != (code < 400)) {
			t.Errorf("%s %s: not the envelope: %v %v", tc.method, tc.path, hdr, env)
		}
		if hdr.Get("Location") != "" || hdr.Get("Allow") != "" {
			t.Errorf("%s %s: ServeMux's own answer: %v", tc.method, tc.path, hdr)
		}
	}
}

// TestRouterNamesRoutes: every route's pattern names it in the access
// log and the metrics; a refused key is "unauthorized" whatever the
// route, an unknown route "not_found".
func TestRouterNamesRoutes(t *testing.T) {
	s := testServer("k")
	for _, tc := range []struct{ method, path, auth, route string }{
		{"GET", "/health", "", "GET /health"},
		{"GET", "/sandboxes/a/files//tmp/x", "Bearer k", "GET /sandboxes/{name}/files/{path...}"},
		{"POST", "/sandboxes/a/files", "Bearer k", "POST /sandboxes/{name}/files"},
		{"PATCH", "/sandboxes/a", "Bearer k", "PATCH /sandboxes/{name}"},
		{"GET", "/nope", "Bearer k", "not_found"},
		{"GET", "/nope", "", "unauthorized"},
		{"GET", "/status", "Bearer wrong", "unauthorized"},
	} {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(tc.method, tc.path, nil)
		req.Host = "localhost"
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		rw := &statusWriter{ResponseWriter: w}
		s.mux.ServeHTTP(rw, routable(req))
		if rw.route != tc.route {
			t.Errorf("%s %s: route %q, want %q", tc.method, tc.path, rw.route, tc.route)
		}
	}
}

// TestRouterOverTCP: the same over a real connection, with raw request
// lines (a Go client would clean nothing, but curl-like clients and
// proxies send what they like): no redirect, no text answer.
func TestRouterOverTCP(t *testing.T) {
	ts := httptest.NewServer(testServer())
	defer ts.Close()
	for _, line := range []string{
		"GET /sandboxes/x/files HTTP/1.1",
		"GET /sandboxes/x/files/a/../../b HTTP/1.1",
		"GET //health/./ HTTP/1.1",
		"TRACE /health HTTP/1.1",
	} {
		c, err := net.DialTimeout("tcp", ts.Listener.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "%s\r\nHost: localhost\r\nConnection: close\r\n\r\n", line)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		resp.Body.Close()
		c.Close()
		if resp.StatusCode != 404 && resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s", line, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if strings.HasPrefix(line, "GET /sandboxes/x/files/a") && resp.StatusCode != 400 {
			t.Errorf("%s: %d, want 400", line, resp.StatusCode)
		}
	}
}

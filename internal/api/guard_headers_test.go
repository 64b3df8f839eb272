package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDuplicateContentType: a body with two Content-Type headers is
// refused, whichever comes first: parsers and proxies disagree on which
// one counts.
func TestDuplicateContentType(t *testing.T) {
	s, _ := guardServer(t, Options{})
	for _, cts := range [][]string{
		{"application/json", "text/plain"},
		{"text/plain", "application/json"},
		{"application/json", "application/json"},
	} {
		req := httptest.NewRequest("POST", "/run", strings.NewReader(runBody))
		req.Host = "127.0.0.1:18888"
		req.Header["Content-Type"] = cts
		req.Header.Set("Authorization", "Bearer k")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		if w.Code != http.StatusUnsupportedMediaType || !strings.Contains(w.Body.String(), "2 Content-Type headers") {
			t.Errorf("Content-Type %q: %d %s, want 415", cts, w.Code, w.Body)
		}
	}
}

// TestHostPort: a Host header's port must be a TCP port (1-65535).
func TestHostPort(t *testing.T) {
	s, _ := guardServer(t, Options{AllowedHosts: []string{"devbox.lan"}})
	for host, want := range map[string]int{
		"localhost:18888": 200, "localhost:65535": 200, "localhost:1": 200, "[::1]:65535": 200, "devbox.lan:8080": 200,
		"localhost:99999": 403, "localhost:65536": 403, "localhost:0": 403, "[::1]:99999": 403, "devbox.lan:99999": 403,
		"127.0.0.1:123456": 403, "localhost:+80": 403, "localhost:": 403,
	} {
		if code, _ := do(s, "GET", "/status", "", "Host", host, "Authorization", "Bearer k"); code != want {
			t.Errorf("Host %q: %d, want %d", host, code, want)
		}
	}
}

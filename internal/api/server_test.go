package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// testServer has no lifecycle (persistent routes answer 501) and a
// resolver that refuses everything (runs answer 400): enough for the
// routing, auth and decoding rules, which need no root. Without keys it
// serves without authentication (InsecureNoAuth).
func testServer(keys ...string) *Server {
	return New(Options{
		Manager:        sandbox.NewManager(sandbox.ManagerOptions{}),
		Resolve:        func(context.Context, RunSpec) (*sandbox.Spec, error) { return nil, errors.New("refused") },
		Keys:           keys,
		InsecureNoAuth: len(keys) == 0,
		Version:        "test",
	})
}

// do sends one request to s's handler as an API client would: Host
// 127.0.0.1:18888 and, with a body, Content-Type application/json.
// hdr are name, value pairs that replace those ("Host" included); an
// empty value removes the header.
func do(s http.Handler, method, path, body string, hdr ...string) (int, map[string]any) {
	code, env, _ := doH(s, method, path, body, hdr...)
	return code, env
}

// doH is do that also returns the answer's headers.
func doH(s http.Handler, method, path, body string, hdr ...string) (int, map[string]any, http.Header) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Host = "127.0.0.1:18888"
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		switch {
		case hdr[i] == "Host":
			req.Host = hdr[i+1]
		case hdr[i+1] == "":
			req.Header.Del(hdr[i])
		default:
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	var env map[string]any
	if w.Header().Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil {
			panic(err)
		}
	}
	return w.Code, env, w.Header()
}

func TestAuthAndRouting(t *testing.T) {
	s := testServer("k1", "k2")
	for _, tc := range []struct {
		method, path, auth string
		code               int
		msg                string
	}{
		{"GET", "/health", "", 200, ""},
		{"GET", "//health/", "", 200, ""},
		{"GET", "/status", "", 401, "Missing Authorization header"},
		{"GET", "/nope", "", 401, "Missing Authorization header"},
		{"GET", "/status", "Basic eA==", 401, "Invalid authorization format. Use: Bearer <api_key>"},
		{"GET", "/status", "Bearer", 401, "Invalid authorization format. Use: Bearer <api_key>"},
		{"GET", "/status", "Bearer k3", 401, "Invalid API key"},
		{"GET", "/status", "Bearer k2", 200, ""},
		{"GET", "/nope", "Bearer k1", 404, "Not found"},
		{"PUT", "/run", "Bearer k1", 404, "Not found"},
		{"GET", "/sandboxes/x/files", "Bearer k1", 404, "Not found"},
		{"GET", "/sandboxes/x", "Bearer k1", 501, ""},
		{"GET", "/sandboxes/-x-", "Bearer k1", 400, ""},
		{"GET", "/sandboxes/x/files/tmp/../etc", "Bearer k1", 400, "Invalid path: '..' is not allowed"},
		{"GET", "/sandboxes/x/files//proc/1", "Bearer k1", 400, "Invalid path: access to /proc is not allowed"},
		{"POST", "/run", "Bearer k1", 400, "Invalid JSON: unexpected end of JSON input"},
	} {
		code, env := do(s, tc.method, tc.path, "", "Authorization", tc.auth)
		if code != tc.code || (tc.msg != "" && env["error"] != tc.msg) {
			t.Errorf("%s %s (%q): %d %v, want %d %q", tc.method, tc.path, tc.auth, code, env, tc.code, tc.msg)
		}
		if _, has := env["data"]; code < 400 && !has {
			t.Errorf("%s %s: no data: %v", tc.method, tc.path, env)
		}
	}
}

func TestBodyLimit(t *testing.T) {
	s := testServer()
	code, env := do(s, "POST", "/run", `{"command":["x"],"pad":"`+strings.Repeat("x", MaxBody)+`"}`)
	if code != 413 {
		t.Errorf("big body: %d %v", code, env)
	}
}

func TestSegmentsAndPaths(t *testing.T) {
	if got := strings.Join(segments("//sandboxes//a/files//tmp/x/"), ","); got != "sandboxes,a,files,tmp,x" {
		t.Errorf("segments: %s", got)
	}
	for in, want := range map[string]string{"/tmp/a": "/tmp/a", "/./tmp//a": "/tmp/a", "/device": "/device", "/dev": "", "/sys/x": "", "/a/../b": "", "relative": ""} {
		got, err := checkPath(in)
		if (want == "") != (err != nil) || got != want {
			t.Errorf("checkPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestStreamWriterKeepsRunesWhole(t *testing.T) {
	w := httptest.NewRecorder()
	ev := &sse{w: w, rc: http.NewResponseController(w)}
	sw := &streamWriter{s: ev, stream: "stdout"}
	b := []byte("aé€")
	for i := range b {
		sw.Write(b[i : i+1])
	}
	sw.flush()
	if strings.Contains(w.Body.String(), `\ufffd`) || strings.Count(w.Body.String(), "event: output") != 3 {
		t.Errorf("frames: %q", w.Body.String())
	}
}

// FuzzDecode: whatever the body, the answer is the JSON envelope with a
// 4xx status (the resolver refuses every valid request), never a panic.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"command":["a"]}`, `null`, `{"command":null,"fast":null}`, `[]`, `{"command":[1]}`, "\x00", `{"commands":[{}]}`} {
		f.Add("/run", s)
		f.Add("/batch/run", s)
	}
	s := testServer()
	f.Fuzz(func(t *testing.T, path, body string) {
		if path != "/run" && path != "/batch/run" && path != "/run/stream" {
			path = "/run"
		}
		code, env := do(s, "POST", path, body)
		if path == "/batch/run" && code == 200 {
			return
		}
		if code < 400 || code >= 500 || env["success"] != false || env["error"] == "" {
			t.Fatalf("%s %q: %d %v", path, body, code, env)
		}
	})
}

//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/agentkernel/agentkernel/pkg/client"
)

const apiKey = "test-key-1"

// apiServer is a running `agentkernel serve`.
type apiServer struct {
	t    testing.TB
	a    *ak
	url  string
	cmd  *exec.Cmd
	errb *lockedBuf
	rec  *recorder
	// stop sends SIGTERM and checks a clean exit (once; also at cleanup).
	stop func()
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startAPI starts `serve` on a free loopback port with a private data dir
// and extra arguments (API keys), and stops it (SIGTERM) when the test
// ends, checking that it exits cleanly.
func startAPI(t testing.TB, args ...string) *apiServer {
	t.Helper()
	a := &ak{dataDir: t.TempDir(), home: t.TempDir(), dir: t.TempDir()}
	if tt, ok := t.(*testing.T); ok {
		a.t = tt
	}
	return startServe(t, a, "listening on ", append([]string{"serve", "--port", "0"}, args...)...)
}

// startServe starts agentkernel with args (a serve command line) as a,
// waits for a stderr line holding ready and keeps the rest of that line
// in url; it stops the server (SIGTERM) when the test ends, checking
// that it exits cleanly.
func startServe(t testing.TB, a *ak, ready string, args ...string) *apiServer {
	t.Helper()
	c := a.cmd(context.Background(), args...)
	pr, pw := io.Pipe()
	s := &apiServer{t: t, a: a, cmd: c, errb: &lockedBuf{}, rec: &recorder{}}
	c.Stderr = pw
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			s.errb.Write([]byte(line + "\n"))
			if _, rest, ok := strings.Cut(line, ready); ok {
				select {
				case addr <- rest:
				default:
				}
			}
		}
	}()
	select {
	case s.url = <-addr:
	case <-time.After(15 * time.Second):
		c.Process.Kill()
		t.Fatalf("serve did not start:\n%s", s.errb.String())
	}
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			c.Process.Signal(syscall.SIGTERM)
			done := make(chan error, 1)
			go func() { done <- c.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("serve exited with %v after SIGTERM:\n%s", err, s.errb.String())
				}
			case <-time.After(20 * time.Second):
				c.Process.Kill()
				t.Errorf("serve did not stop on SIGTERM")
			}
			pw.Close()
			if out := s.errb.String(); strings.Contains(out, "panic:") || strings.Contains(out, "goroutine ") {
				t.Errorf("serve printed a stack trace:\n%s", out)
			}
		})
	}
	t.Cleanup(s.stop)
	return s
}

// client returns a pkg/client Client whose exchanges are recorded for the
// OpenAPI check.
func (s *apiServer) client(key string) *client.Client {
	return client.New(client.WithBaseURL(s.url), client.WithAPIKey(key),
		client.WithHTTPClient(&http.Client{Transport: s.rec.transport()}))
}

// raw is one request on the wire, recorded too: with the test's key and,
// with a body, Content-Type application/json; hdr are name, value pairs
// that replace those ("Host" too; an empty value removes the header).
type rawResp struct {
	status int
	header http.Header
	body   []byte
	env    map[string]json.RawMessage
}

func (s *apiServer) raw(method, path, body string, hdr ...string) rawResp {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
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
	resp, err := (&http.Client{Transport: s.rec.transport()}).Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := rawResp{status: resp.StatusCode, header: resp.Header, body: b}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(b, &r.env); err != nil {
			s.t.Fatalf("%s %s: not JSON: %v\n%s", method, path, err, b)
		}
		for k, v := range r.env {
			if string(v) == "null" {
				s.t.Errorf("%s %s: envelope key %q is null: %s", method, path, k, b)
			}
		}
	}
	return r
}

// str is a JSON string field of the envelope.
func (r rawResp) str(key string) string {
	var s string
	json.Unmarshal(r.env[key], &s)
	return s
}

// expect checks status and, for errors, the message.
func (r rawResp) expect(t *testing.T, what string, status int, msg string) {
	t.Helper()
	if r.status != status {
		t.Errorf("%s: status %d, want %d: %s", what, r.status, status, r.body)
		return
	}
	if msg != "" && r.str("error") != msg && !(strings.HasSuffix(msg, "*") && strings.HasPrefix(r.str("error"), strings.TrimSuffix(msg, "*"))) {
		t.Errorf("%s: error %q, want %q", what, r.str("error"), msg)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q", what, ct)
	}
	var ok bool
	json.Unmarshal(r.env["success"], &ok)
	if ok != (status < 400) {
		t.Errorf("%s: success=%v with status %d", what, ok, status)
	}
	if ok {
		if _, has := r.env["data"]; !has {
			t.Errorf("%s: no data: %s", what, r.body)
		}
	}
}

// dataString checks that data is a JSON string equal to want.
func (r rawResp) dataString(t *testing.T, what, want string) {
	t.Helper()
	var s string
	if err := json.Unmarshal(r.env["data"], &s); err != nil || s != want {
		t.Errorf("%s: data %s, want the string %q", what, r.env["data"], want)
	}
}

func TestAPIContract(t *testing.T) {
	s := startAPI(t, "--api-key", apiKey, "--api-key", "second-key")
	c := s.client(apiKey)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()

	t.Run("health-status-stats", func(t *testing.T) {
		r := s.raw("GET", "/health", "", "Authorization", "")
		r.expect(t, "health without auth", 200, "")
		r.dataString(t, "health", "ok")
		st, err := c.Status(ctx)
		if err != nil || !st.APIKeyConfigured || st.Backend == "" || st.Version == "" {
			t.Errorf("status: %+v %v", st, err)
		}
		stats, err := c.Stats(ctx)
		if err != nil || stats.Backend == "" || stats.ResourceUsage.MemoryTotalMB <= 0 {
			t.Errorf("stats: %+v %v", stats, err)
		}
		// The second key works too; the Go SDK's GET with Content-Type and no body.
		s.raw("GET", "/status", "", "Authorization", "Bearer second-key", "Content-Type", "application/json").expect(t, "second key", 200, "")
		s.raw("GET", "/metrics", "").expect200(t, "metrics")
		checkDoctorAnswer(t, s.raw("GET", "/doctor", ""))
		if d, err := c.Doctor(ctx); err != nil || len(d.Checks) == 0 || d.Isolation == "" || d.Checks[len(d.Checks)-1].Name != "backend" {
			t.Errorf("client Doctor: %+v %v", d, err)
		}
		s.raw("GET", "/doctor", "", "Authorization", "").expect(t, "doctor without auth", 401, "Missing Authorization header")
		if r := s.raw("GET", "/openapi.yaml", ""); r.status != 200 || !bytes.Contains(r.body, []byte("openapi: 3.1")) {
			t.Errorf("openapi.yaml: %d", r.status)
		}
	})

	t.Run("auth", func(t *testing.T) {
		s.raw("GET", "/status", "", "Authorization", "").expect(t, "missing", 401, "Missing Authorization header")
		s.raw("GET", "/status", "", "Authorization", "Basic dXNlcjpwYXNz").expect(t, "basic", 401, "Invalid authorization format. Use: Bearer <api_key>")
		s.raw("GET", "/status", "", "Authorization", "bearer "+apiKey).expect(t, "lower-case bearer", 401, "Invalid authorization format. Use: Bearer <api_key>")
		s.raw("GET", "/status", "", "Authorization", "Bearer wrong").expect(t, "wrong", 401, "Invalid API key")
		s.raw("GET", "/status", "", "Authorization", "Bearer x"+apiKey).expect(t, "prefixed", 401, "Invalid API key")
		// Auth comes before routing.
		s.raw("GET", "/no/such/route", "", "Authorization", "").expect(t, "unknown route unauthenticated", 401, "Missing Authorization header")
		s.raw("GET", "/no/such/route", "").expect(t, "unknown route", 404, "Not found")
		s.raw("DELETE", "/health", "").expect(t, "wrong method", 404, "Not found")
		var ae *client.APIError
		if _, err := s.client("wrong").Status(ctx); !errors.As(err, &ae) || ae.Status != 401 || !errors.Is(err, client.ErrUnauthorized) {
			t.Errorf("client with a wrong key: %v", err)
		}
	})

	// Before auth and routing: Host, Origin, Content-Type (web pages).
	t.Run("browser-checks", func(t *testing.T) {
		s.raw("GET", "/health", "", "Host", "evil.example:18888").expect(t, "rebinding Host", 403, "Forbidden: Host \"evil.example:18888\" is not a name of this server*")
		s.raw("GET", "/status", "", "Host", "localhost").expect(t, "Host localhost", 200, "")
		s.raw("POST", "/run", `{"command":["true"],"image":"host"}`, "Origin", "http://evil.example").expect(t, "foreign Origin", 403, "Forbidden: requests from web pages are refused*")
		s.raw("POST", "/run", `{"command":["true"],"image":"host"}`, "Content-Type", "text/plain").expect(t, "text/plain", 415, "Unsupported Content-Type \"text/plain\"*")
		s.raw("POST", "/run", `{"command":["true"],"image":"host"}`, "Content-Type", "text/plain", "Authorization", "").expect(t, "text/plain before auth", 415, "*")
		s.raw("POST", "/no/such/route", `x=1`, "Content-Type", "application/x-www-form-urlencoded").expect(t, "form before routing", 415, "*")
	})

	t.Run("run", func(t *testing.T) {
		out, err := c.Run(ctx, []string{"sh", "-c", "echo hello"}, &client.RunOptions{Image: "host"})
		if err != nil || out != "hello\n" {
			t.Errorf("run: %q %v", out, err)
		}
		// argv unchanged: an argument with spaces stays one argument.
		out, err = c.Run(ctx, []string{"printf", "%s|", "a b", "c"}, &client.RunOptions{Image: "host", Profile: "restrictive"})
		if err != nil || out != "a b|c|" {
			t.Errorf("argv: %q %v", out, err)
		}
		_, err = c.Run(ctx, []string{"sh", "-c", "echo partial; exit 3"}, &client.RunOptions{Image: "host"})
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != 409 || ae.ExitCode == nil || *ae.ExitCode != 3 || ae.Output != "partial\n" ||
			ae.Message != "Command exited with code 3: partial\n" {
			t.Errorf("non-zero exit: %#v", err)
		}
		// Raw: explicit nulls are absent, unknown fields ignored; 409's keys.
		r := s.raw("POST", "/run", `{"command":["sh","-c","exit 2"],"image":"host","profile":null,"fast":null,"extra":1}`)
		r.expect(t, "409", 409, "Command exited with code 2: ")
		if string(r.env["exit_code"]) != "2" || string(r.env["output"]) != `""` {
			t.Errorf("409 body: %s", r.body)
		}
		s.raw("POST", "/run", `{"command":[]}`).expect(t, "empty command", 400, "command is required")
		s.raw("POST", "/run", `{"command":`).expect(t, "malformed", 400, "Invalid JSON: *")
		s.raw("POST", "/run", `{"command":"ls"}`).expect(t, "wrong type", 400, "Invalid JSON: *")
		s.raw("POST", "/run", `{"command":["true"],"image":"host","profile":"nonsense"}`).expect(t, "bad profile", 400, "")
		big := `{"command":["true"],"pad":"` + strings.Repeat("x", 17<<20) + `"}`
		s.raw("POST", "/run", big).expect(t, "too large", 413, "Request body exceeds the maximum size of 16777216 bytes")

		res, err := c.BatchRun(ctx, []client.BatchCommand{
			{Command: []string{"echo", "one"}, RunOptions: client.RunOptions{Image: "host"}},
			{Command: []string{"sh", "-c", "exit 5"}, RunOptions: client.RunOptions{Image: "host"}},
			{Command: []string{}},
		})
		if err != nil || len(res) != 3 || res[0].Output == nil || *res[0].Output != "one\n" || res[0].Error != nil ||
			res[1].Output != nil || res[1].Error == nil || !strings.Contains(*res[1].Error, "code 5") || res[2].Error == nil {
			t.Errorf("batch: %+v %v", res, err)
		}
		r = s.raw("POST", "/batch/run", `{"commands":[{"command":["true"],"image":"host"}]}`)
		if r.status != 200 || !bytes.Contains(r.body, []byte(`"output":"","error":null`)) {
			t.Errorf("batch keys: %s", r.body)
		}
		s.raw("POST", "/batch/run", `{"commands":[]}`).expect(t, "empty batch", 400, "commands array is required and must not be empty")
	})

	t.Run("stream", func(t *testing.T) { testStream(t, s, c, ctx) })

	t.Run("sandboxes", func(t *testing.T) {
		const name = "api-sb1"
		t.Cleanup(func() { s.a.run("sandbox", "rm", "--force", name) })
		r := s.raw("POST", "/sandboxes", `{"name":"`+name+`","image":"host","vcpus":null,"memory_mb":null,"profile":null,"labels":{"team":"ml","env":"dev"},"description":"d1"}`)
		r.expect(t, "create", 201, "")
		var info client.SandboxInfo
		json.Unmarshal(r.env["data"], &info)
		if info.Name != name || info.Status != "running" || info.Backend == "" || info.Labels["team"] != "ml" || info.CreatedAt == "" {
			t.Errorf("created: %s", r.body)
		}
		s.raw("POST", "/sandboxes", `{"name":"`+name+`","image":"host"}`).expect(t, "exists", 409, "*")
		s.raw("POST", "/sandboxes", `{"name":"-bad-","image":"host"}`).expect(t, "bad name", 400, "")
		s.raw("POST", "/sandboxes", `{"name":"okname","image":"host","profile":"weird"}`).expect(t, "bad profile", 400, "Invalid profile 'weird'. Use: permissive, moderate, restrictive")

		// Label filters (all must match) and empty path segments.
		for _, tc := range []struct {
			labels map[string]string
			n      int
		}{{nil, 1}, {map[string]string{"team": "ml"}, 1}, {map[string]string{"team": "ml", "env": "dev"}, 1}, {map[string]string{"team": "ml", "env": "prod"}, 0}, {map[string]string{"x": "y"}, 0}} {
			l, err := c.ListSandboxes(ctx, tc.labels)
			if err != nil || len(l) != tc.n {
				t.Errorf("list %v: %d sandboxes, want %d (%v)", tc.labels, len(l), tc.n, err)
			}
		}
		if r := s.raw("GET", "/sandboxes?label=team:ml&label=env:dev", ""); r.status != 200 || !bytes.Contains(r.body, []byte(name)) {
			t.Errorf("raw label filter: %s", r.body)
		}
		s.raw("GET", "//sandboxes//"+name+"/", "").expect(t, "empty segments", 200, "")
		s.raw("GET", "/sandboxes/nope", "").expect(t, "unknown", 404, "Sandbox not found")

		// PATCH: labels replace the whole map; absent fields stay.
		r = s.raw("PATCH", "/sandboxes/"+name, `{"labels":{"only":"this"}}`)
		r.expect(t, "patch", 200, "")
		info = client.SandboxInfo{}
		json.Unmarshal(r.env["data"], &info)
		if len(info.Labels) != 1 || info.Labels["only"] != "this" || info.Description != "d1" {
			t.Errorf("patch labels: %s", r.body)
		}
		desc := "d2"
		if got, err := c.UpdateSandbox(ctx, name, client.UpdateOptions{Description: &desc}); err != nil || got.Description != "d2" || got.Labels["only"] != "this" {
			t.Errorf("patch description: %+v %v", got, err)
		}
		s.raw("PATCH", "/sandboxes/nope", `{}`).expect(t, "patch unknown", 404, "Sandbox not found")

		// exec
		out, err := c.Exec(ctx, name, []string{"sh", "-c", "echo $FOO; pwd"}, &client.ExecOptions{Env: []string{"FOO=bar"}, Workdir: "/tmp"})
		if err != nil || out != "bar\n/tmp\n" {
			t.Errorf("exec: %q %v", out, err)
		}
		r = s.raw("POST", "/sandboxes/"+name+"/exec", `{"command":["sh","-c","echo no; exit 7"]}`)
		r.expect(t, "exec exit", 409, "Command exited with code 7: no\n")
		if string(r.env["exit_code"]) != "7" || r.str("output") != "no\n" {
			t.Errorf("exec 409: %s", r.body)
		}
		s.raw("POST", "/sandboxes/"+name+"/exec", `{"command":[]}`).expect(t, "exec empty", 400, "command is required")
		s.raw("POST", "/sandboxes/nope/exec", `{"command":["true"]}`).expect(t, "exec unknown", 404, "Sandbox not found")

		// Files: SDK-style double slash, string payloads, utf8/base64.
		r = s.raw("PUT", "/sandboxes/"+name+"/files//tmp/d/a.txt", `{"content":"héllo","encoding":null}`)
		r.expect(t, "write", 200, "")
		r.dataString(t, "write", "Wrote 6 bytes to /tmp/d/a.txt")
		r = s.raw("GET", "/sandboxes/"+name+"/files//tmp/d/a.txt", "", "Content-Type", "application/json")
		r.expect(t, "read", 200, "")
		if string(r.env["data"]) != `{"content":"héllo","encoding":"utf8","size":6}` {
			t.Errorf("read: %s", r.env["data"])
		}
		bin := []byte{0, 1, 0xff, 0xfe, 'x'}
		if err := c.WriteFile(ctx, name, "/tmp/bin", bin); err != nil {
			t.Errorf("write binary: %v", err)
		}
		if f, err := c.ReadFile(ctx, name, "/tmp/bin"); err != nil || f.Encoding != "base64" || f.Size != 5 {
			t.Errorf("read binary: %+v %v", f, err)
		} else if b, _ := f.Bytes(); !bytes.Equal(b, bin) {
			t.Errorf("binary round trip: %v", b)
		}
		s.raw("PUT", "/sandboxes/"+name+"/files/tmp/x", `{"content":"!!","encoding":"base64"}`).expect(t, "bad base64", 400, "Invalid base64: *")
		for _, p := range []string{"/files/tmp/../etc/passwd", "/files/proc/self/environ", "/files//sys/kernel", "/files/dev/null"} {
			s.raw("GET", "/sandboxes/"+name+p, "").expect(t, "bad path "+p, 400, "")
		}
		s.raw("POST", "/sandboxes/"+name+"/files", `{"files":{"/dev/x":"a"}}`).expect(t, "write files to /dev", 400, "")
		s.raw("GET", "/sandboxes/"+name+"/files/tmp/missing", "").expect(t, "missing file", 404, "")
		if n, err := c.WriteFiles(ctx, name, map[string]string{"/data/m/1": "a", "/data/m/2": "b"}); err != nil || n != 2 {
			t.Errorf("write files: %d %v", n, err)
		}
		if out, _ := c.Exec(ctx, name, []string{"cat", "/data/m/1", "/data/m/2"}, nil); out != "ab" {
			t.Errorf("written files: %q", out)
		}
		r = s.raw("DELETE", "/sandboxes/"+name+"/files//tmp/d/a.txt", "")
		r.expect(t, "delete file", 200, "")
		r.dataString(t, "delete file", "Deleted /tmp/d/a.txt")
		if _, err := c.ReadFile(ctx, name, "/tmp/d/a.txt"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("read deleted: %v", err)
		}

		// Logs, extend, stop/start, remove.
		logs, err := c.Logs(ctx, name)
		if err != nil || len(logs) < 3 || logs[0]["action"] != "create" {
			t.Errorf("logs: %v %v", logs, err)
		}
		s.raw("GET", "/sandboxes/nope/logs", "").expect(t, "logs unknown", 404, "Sandbox not found")
		if exp, err := c.Extend(ctx, name, "2h"); err != nil || exp == nil || time.Until(*exp) < 110*time.Minute {
			t.Errorf("extend: %v %v", exp, err)
		}
		if r := s.raw("POST", "/sandboxes/"+name+"/extend", ""); r.status != 200 || !bytes.Contains(r.body, []byte(`"expires_at":"`)) {
			t.Errorf("extend default: %s", r.body)
		}
		// Days, as upstream's docs write them ("2d"); nonsense is a 400.
		if exp, err := c.Extend(ctx, name, "2d"); err != nil || exp == nil || time.Until(*exp) < 47*time.Hour {
			t.Errorf("extend 2d: %v %v", exp, err)
		}
		s.raw("POST", "/sandboxes/"+name+"/extend", `{"by":"soon"}`).expect(t, "extend soon", 400, "Invalid duration *")
		r = s.raw("POST", "/sandboxes/"+name+"/stop", "")
		r.expect(t, "stop", 200, "")
		r.dataString(t, "stop", "Sandbox stopped")
		if got, _ := c.GetSandbox(ctx, name); got == nil || got.Status != "stopped" {
			t.Errorf("after stop: %+v", got)
		}
		s.raw("POST", "/sandboxes/"+name+"/exec", `{"command":["true"]}`).expect(t, "exec stopped", 409, "*")
		r = s.raw("POST", "/sandboxes/"+name+"/start", "")
		r.expect(t, "start", 200, "")
		r.dataString(t, "start", "Sandbox started")
		if out, err := c.Exec(ctx, name, []string{"echo", "up"}, nil); err != nil || out != "up\n" {
			t.Errorf("exec after restart: %q %v", out, err)
		}
		s.raw("POST", "/sandboxes/nope/start", "").expect(t, "start unknown", 404, "Sandbox not found")
		r = s.raw("DELETE", "/sandboxes/"+name, "")
		r.expect(t, "remove", 200, "")
		r.dataString(t, "remove", "Sandbox removed")
		s.raw("DELETE", "/sandboxes/"+name, "").expect(t, "remove again", 404, "Sandbox not found")
		if gc, err := c.GC(ctx); err != nil || gc.Removed == nil || gc.Count != len(gc.Removed) {
			t.Errorf("gc: %+v %v", gc, err)
		}
		if r := s.raw("POST", "/gc", ""); !bytes.Contains(r.body, []byte(`"removed":[]`)) {
			t.Errorf("gc raw: %s", r.body)
		}
	})

	t.Run("with-sandbox", func(t *testing.T) {
		boom := errors.New("boom")
		err := c.WithSandbox(ctx, client.CreateOptions{Name: "api-with", Image: "host"}, func(ctx context.Context, sb *client.SandboxInfo) error {
			if out, err := c.Exec(ctx, sb.Name, []string{"echo", "in"}, nil); err != nil || out != "in\n" {
				t.Errorf("exec in WithSandbox: %q %v", out, err)
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Errorf("WithSandbox error: %v", err)
		}
		if _, err := c.GetSandbox(ctx, "api-with"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("WithSandbox left the sandbox: %v", err)
		}
	})

	t.Run("exec-more", func(t *testing.T) { testExecMoreAPI(t, s) })

	t.Run("snapshots", func(t *testing.T) { testSnapshotsAPI(t, s, c) })
	t.Run("openapi", func(t *testing.T) { s.rec.validate(t) })

	if l, err := c.ListSandboxes(ctx, nil); err != nil || len(l) != 0 {
		t.Errorf("sandboxes left: %v %v", l, err)
	}
}

func (r rawResp) expect200(t *testing.T, what string) {
	t.Helper()
	if r.status != 200 {
		t.Errorf("%s: status %d: %s", what, r.status, r.body)
	}
}

var frameRE = regexp.MustCompile(`^event: ([a-z]+)\ndata: (\{.*\})\n\n$`)

// testStream: frames exactly as the contract says, the first output frame
// before the command's sleep ends, stdout and stderr apart.
func testStream(t *testing.T, s *apiServer, c *client.Client, ctx context.Context) {
	req, _ := http.NewRequestWithContext(ctx, "POST", s.url+"/run/stream",
		strings.NewReader(`{"command":["sh","-c","echo first; sleep 1; echo second >&2"],"image":"host"}`))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("stream: %d %v", resp.StatusCode, resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	type frame struct {
		name string
		data map[string]any
		at   time.Duration
	}
	var frames []frame
	for {
		var f bytes.Buffer
		for {
			line, err := br.ReadString('\n')
			f.WriteString(line)
			if err != nil || line == "\n" {
				break
			}
		}
		if f.Len() == 0 {
			break
		}
		m := frameRE.FindStringSubmatch(f.String())
		if m == nil {
			t.Fatalf("bad frame %q", f.String())
		}
		var d map[string]any
		if err := json.Unmarshal([]byte(m[2]), &d); err != nil {
			t.Fatalf("frame data %q: %v", m[2], err)
		}
		frames = append(frames, frame{m[1], d, time.Since(start)})
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("stream not closed after the last frame")
	}
	var names []string
	for _, f := range frames {
		names = append(names, f.name)
	}
	got := strings.Join(names, ",")
	if got != "started,output,output,done" {
		t.Fatalf("frames: %s (%+v)", got, frames)
	}
	if frames[0].data["fast"] != true || frames[0].data["timestamp"] == nil {
		t.Errorf("started: %v", frames[0].data)
	}
	if frames[1].data["data"] != "first\n" || frames[1].data["stream"] != "stdout" ||
		frames[2].data["data"] != "second\n" || frames[2].data["stream"] != "stderr" {
		t.Errorf("output frames: %v %v", frames[1].data, frames[2].data)
	}
	if d := frames[3].data; d["exit_code"] != float64(0) || d["success"] != true {
		t.Errorf("done: %v", d)
	}
	if gap := frames[2].at - frames[1].at; gap < 700*time.Millisecond {
		t.Errorf("first output arrived %v before the second: not streamed as it happened", gap)
	}
	t.Logf("first output after %v, done after %v", frames[1].at, frames[3].at)

	// Through the client: iterator, exit code, early 400.
	var evs []string
	for ev, err := range c.RunStream(ctx, []string{"sh", "-c", "echo x; exit 4"}, &client.RunOptions{Image: "host"}) {
		if err != nil {
			t.Fatalf("RunStream: %v", err)
		}
		evs = append(evs, ev.Name)
		if ev.Name == "done" && (ev.ExitCode != 4 || ev.Success) {
			t.Errorf("done: %+v", ev)
		}
		if ev.Name == "output" && ev.Output != "x\n" {
			t.Errorf("output: %+v", ev)
		}
	}
	if strings.Join(evs, ",") != "started,output,done" {
		t.Errorf("client events: %v", evs)
	}
	for _, err := range c.RunStream(ctx, nil, nil) {
		if !errors.Is(err, client.ErrBadRequest) {
			t.Errorf("empty command stream: %v", err)
		}
	}
	s.raw("POST", "/run/stream", `{"command":[]}`).expect(t, "stream empty", 400, "command is required")
	s.raw("POST", "/run/stream", `{"command":["true"]}`, "Authorization", "").expect(t, "stream unauth", 401, "Missing Authorization header")
}

// recorder keeps every exchange for the OpenAPI check.
type recorder struct {
	mu  sync.Mutex
	exs []exchange
}

type exchange struct {
	method, path string
	status       int
	header       http.Header
	body         []byte
}

type recordingTransport struct{ r *recorder }

func (r *recorder) transport() http.RoundTripper { return recordingTransport{r} }

func (rt recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		if err == nil {
			rt.r.add(exchange{req.Method, req.URL.Path, resp.StatusCode, resp.Header, nil})
		}
		return resp, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	rt.r.add(exchange{req.Method, req.URL.Path, resp.StatusCode, resp.Header, b})
	return resp, nil
}

func (r *recorder) add(e exchange) {
	r.mu.Lock()
	r.exs = append(r.exs, e)
	r.mu.Unlock()
}

// template maps a request path to its OpenAPI path ("" when none).
func template(p string) string {
	var seg []string
	for _, s := range strings.Split(p, "/") {
		if s != "" {
			seg = append(seg, s)
		}
	}
	switch {
	case len(seg) == 0:
		return ""
	case seg[0] == "snapshots" && len(seg) > 1:
		return "/snapshots/{name}" + strings.TrimSuffix("/"+strings.Join(seg[2:], "/"), "/")
	case seg[0] != "sandboxes":
		return "/" + strings.Join(seg, "/")
	case len(seg) == 1:
		return "/sandboxes"
	case len(seg) == 2:
		return "/sandboxes/{name}"
	case seg[2] == "files" && len(seg) > 3:
		return "/sandboxes/{name}/files/{path}"
	case seg[1] == "by-uuid" && len(seg) == 3:
		return "/sandboxes/by-uuid/{uuid}"
	case len(seg) >= 5 && seg[2] == "exec" && seg[3] == "detached":
		if len(seg) == 5 {
			return "/sandboxes/{name}/exec/detached/{id}"
		}
		return "/sandboxes/{name}/exec/detached/{id}/" + strings.Join(seg[5:], "/")
	}
	return "/sandboxes/{name}/" + strings.Join(seg[2:], "/")
}

// validate checks every recorded answer against api/openapi.yaml with
// kin-openapi: the status must be documented and a JSON body must match
// its schema. (kin-openapi v0.133 validates documents as OpenAPI 3.0 and
// rejects 3.1's "null" type, so the document itself is only loaded, not
// validated; its schemas, null types included, are applied to answers.)
func (r *recorder) validate(t *testing.T) {
	doc, checked := r.validateAnswers(t)
	// Every documented operation but /mcp was exercised.
	for _, p := range doc.Paths.InMatchingOrder() {
		for m := range doc.Paths.Find(p).Operations() {
			if k := m + " " + p; !checked[k] && p != "/mcp" {
				t.Errorf("no answer of %s was validated", k)
			}
		}
	}
}

// validateAnswers checks every recorded answer against openapi.yaml and
// returns the document and the operations ("GET /status") it checked.
func (r *recorder) validateAnswers(t *testing.T) (*openapi3.T, map[string]bool) {
	doc, err := openapi3.NewLoader().LoadFromFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	checked := map[string]bool{}
	for _, ex := range r.exs {
		tmpl := template(ex.path)
		if ex.status == 401 || ex.status == 403 || ex.status == 415 || (ex.status == 404 && tmpl != "" && doc.Paths.Find(tmpl) == nil) || ex.status == 413 {
			// Answered before routing: checked against the Error schema.
			checkSchema(t, doc, "Error", ex)
			continue
		}
		pi := doc.Paths.Find(tmpl)
		if pi == nil {
			t.Errorf("%s %s: path %s not in openapi.yaml", ex.method, ex.path, tmpl)
			continue
		}
		op := pi.GetOperation(ex.method)
		if op == nil {
			checkSchema(t, doc, "Error", ex)
			continue
		}
		req, _ := http.NewRequest(ex.method, "http://localhost"+ex.path, nil)
		opts := &openapi3filter.Options{IncludeResponseStatus: true}
		if ct := ex.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			opts.ExcludeResponseBody = true
		}
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, Options: opts,
				Route: &routers.Route{Spec: doc, Path: tmpl, PathItem: pi, Method: ex.method, Operation: op}},
			Status: ex.status, Header: ex.header, Body: io.NopCloser(bytes.NewReader(ex.body)), Options: opts,
		}
		if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
			t.Errorf("%s %s → %d does not match openapi.yaml: %v\n%s", ex.method, ex.path, ex.status, err, ex.body)
		}
		checked[ex.method+" "+tmpl] = true
	}
	t.Logf("%d answers validated against openapi.yaml", len(r.exs))
	return doc, checked
}

func checkSchema(t *testing.T, doc *openapi3.T, name string, ex exchange) {
	t.Helper()
	var v any
	if err := json.Unmarshal(ex.body, &v); err != nil {
		t.Errorf("%s %s → %d: %v", ex.method, ex.path, ex.status, err)
		return
	}
	if err := doc.Components.Schemas[name].Value.VisitJSON(v); err != nil {
		t.Errorf("%s %s → %d: not an %s: %v", ex.method, ex.path, ex.status, name, err)
	}
}

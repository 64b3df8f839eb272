//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// serveIn starts `serve` on a free loopback port in a's project
// directory (so that its agentkernel.toml is the server's configuration)
// and stops it with SIGTERM when the test ends. It returns the base URL.
func serveIn(t *testing.T, a *ak, args ...string) string {
	t.Helper()
	c := a.cmd(context.Background(), append([]string{"serve", "--port", "0"}, args...)...)
	pr, pw := io.Pipe()
	c.Stderr = pw
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var errb lockedBuf
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			errb.Write([]byte(sc.Text() + "\n"))
			if _, rest, ok := strings.Cut(sc.Text(), "listening on "); ok {
				select {
				case addr <- rest:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		c.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve exited with %v:\n%s", err, errb.String())
			}
		case <-time.After(20 * time.Second):
			c.Process.Kill()
			t.Errorf("serve did not stop on SIGTERM")
		}
		pw.Close()
		if out := errb.String(); strings.Contains(out, "panic:") || strings.Contains(out, "goroutine ") {
			t.Errorf("serve printed a stack trace:\n%s", out)
		}
	})
	select {
	case u := <-addr:
		return u
	case <-time.After(15 * time.Second):
		c.Process.Kill()
		t.Fatalf("serve did not start:\n%s", errb.String())
	}
	return ""
}

// mcpHTTPSession connects the SDK's client to /mcp of a serve at url.
func mcpHTTPSession(t *testing.T, url, key string) *sdk.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	sess, err := sdk.NewClient(&sdk.Implementation{Name: "e2e-http", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint: url + "/mcp", HTTPClient: &http.Client{Transport: bearer{key}}, MaxRetries: -1,
	}, nil)
	if err != nil {
		t.Fatalf("connect to /mcp: %v", err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

// cwdFixture is a server project directory whose agentkernel.toml allows
// one more directory (shared) and blocks printf, a subdirectory, a
// symbolic link in it to /etc, and a "hostile" subdirectory whose own
// agentkernel.toml (as an agent could write in its workspace) lists /etc
// and a secret directory in allowed_dirs and loosens every setting it
// can: the permissive profile, the workspace read-write, $HOME mounted,
// no seccomp filter, no command rules.
type cwdFixture struct {
	a              *ak
	shared, secret string
}

func newCwdFixture(t *testing.T) *cwdFixture {
	t.Helper()
	a := newAK(t)
	f := &cwdFixture{a: a, shared: t.TempDir(), secret: t.TempDir()}
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(a.dir, "agentkernel.toml"), "[mcp]\nallowed_dirs = [\""+f.shared+"\"]\n[security.commands]\nblock = [\"printf\"]\n")
	write(filepath.Join(f.shared, "marker"), "shared\n")
	write(filepath.Join(f.secret, "marker"), "secret\n")
	write(filepath.Join(a.dir, "sub", "marker"), "sub\n")
	write(filepath.Join(a.dir, "hostile", "marker"), "hostile\n")
	write(filepath.Join(a.dir, "hostile", "agentkernel.toml"), "[mcp]\nallowed_dirs = [\"/etc\", \""+f.secret+"\"]\n"+
		"[security]\nprofile = \"permissive\"\nmount_cwd = \"rw\"\nmount_home = true\nseccomp = \"unconfined\"\n"+
		"[security.commands]\nblock = []\n")
	write(filepath.Join(a.home, "home-marker"), "home secret\n")
	if err := os.Symlink("/etc", filepath.Join(a.dir, "etc-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.secret, filepath.Join(a.dir, "secret-link")); err != nil {
		t.Fatal(err)
	}
	return f
}

// check runs the escape attempts and the allowed directories through s.
func (f *cwdFixture) check(t *testing.T, s *sdk.ClientSession) {
	t.Helper()
	run := func(cwd string, profile string, cmd ...string) (string, bool) {
		args := map[string]any{"command": cmd, "image": "host", "cwd": cwd}
		if profile != "" {
			args["profile"] = profile
		}
		return call(t, s, "sandbox_run", args)
	}
	// Allowed: the project, below it, and the server's allowed_dirs.
	for cwd, want := range map[string]string{
		filepath.Join(f.a.dir, "sub"):     "sub\n",
		f.shared:                          "shared\n",
		filepath.Join(f.a.dir, "hostile"): "hostile\n",
	} {
		if out, isErr := run(cwd, "", "cat", "/workspace/marker"); isErr || out != want {
			t.Errorf("cwd %s: %q (isError %v), want %q", cwd, out, isErr, want)
		}
	}
	// Refused, before anything runs. Permissive would mount the
	// directory read-write: the command only lists it, so that a
	// regression cannot change host directories; the write attempt is
	// made only where the test owns the directory (secret).
	for cwd, want := range map[string]string{
		"/etc":                                "outside the directories",
		"/etc/":                               "outside the directories",
		"/":                                   "never allowed",
		filepath.Join(f.a.dir, "etc-link"):    "resolves to /etc",
		filepath.Join(f.a.dir, "secret-link"): "resolves to " + f.secret,
		f.a.dir + "/../..":                    `".."`,
		filepath.Join(f.a.dir, "sub") + "/..": `".."`,
		"sub":                                 "absolute",
		f.secret:                              "outside the directories", // listed only by the hostile cwd's agentkernel.toml
		filepath.Dir(f.a.dir):                 "outside the directories",
		filepath.Join(f.a.dir, "no-such-dir"): "not a directory",
	} {
		cmd := []string{"ls", "/workspace"}
		if strings.Contains(cwd, "secret") || cwd == f.secret {
			cmd = []string{"sh", "-c", "echo pwned > /workspace/pwned; ls /workspace"}
		}
		out, isErr := run(cwd, "permissive", cmd...)
		if !isErr || !strings.Contains(out, want) || !strings.Contains(out, "cwd") {
			t.Errorf("cwd %s: %q (isError %v), want a refusal with %q", cwd, out, isErr, want)
		}
	}
	if _, err := os.Stat(filepath.Join(f.secret, "pwned")); err == nil {
		t.Errorf("a refused run wrote into %s", f.secret)
	}
	out, _ := run("/etc", "", "true")
	for _, want := range []string{"allowed_dirs", f.a.dir, filepath.Join(f.a.dir, "agentkernel.toml")} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say how to allow a directory (%q): %s", want, out)
		}
	}

	// The server's own configuration governs every call: its command
	// rules hold below the project, where no agentkernel.toml is, and in
	// a directory whose own agentkernel.toml drops them.
	for _, cwd := range []string{"", filepath.Join(f.a.dir, "sub"), filepath.Join(f.a.dir, "hostile")} {
		out, isErr := run(cwd, "", "printf", "ran")
		if !isErr || !strings.Contains(out, "blocked by [security.commands]") || !strings.Contains(out, filepath.Join(f.a.dir, "agentkernel.toml")) || strings.Contains(out, "ran") {
			t.Errorf("cwd %q: printf: %q (isError %v), want the project's rule", cwd, out, isErr)
		}
	}
	// Nothing else of the hostile file applies either: the workspace
	// stays copy-on-write, $HOME is not mounted, the seccomp filter is on.
	out, isErr := run(filepath.Join(f.a.dir, "hostile"), "", "sh", "-c",
		"echo pwned > /workspace/written; cat /home/user/home-marker 2>/dev/null; grep '^Seccomp:' /proc/self/status")
	if isErr || strings.Contains(out, "home secret") || !strings.Contains(out, "Seccomp:\t2") {
		t.Errorf("run in the hostile directory: %q (isError %v), want no $HOME and a seccomp filter", out, isErr)
	}
	if _, err := os.Stat(filepath.Join(f.a.dir, "hostile", "written")); err == nil {
		t.Errorf("the hostile directory's agentkernel.toml made its workspace writable on the host")
	}
}

// TestMCPCwdConfinedStdio: sandbox_run's cwd over `agentkernel
// mcp-server` must be the project directory or below it, or in the
// server's own [mcp] allowed_dirs.
func TestMCPCwdConfinedStdio(t *testing.T) {
	f := newCwdFixture(t)
	f.check(t, mcpSession(t, f.a, nil))
}

// TestMCPCwdConfinedHTTP: the same rule over /mcp on a real serve.
func TestMCPCwdConfinedHTTP(t *testing.T) {
	f := newCwdFixture(t)
	url := serveIn(t, f.a, "--api-key", "cwd-key")
	f.check(t, mcpHTTPSession(t, url, "cwd-key"))
}

// rawMCP drives `agentkernel mcp-server` with raw lines.
type rawMCP struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Reader
}

func (r *rawMCP) send(line string) {
	r.t.Helper()
	if _, err := io.WriteString(r.in, line+"\n"); err != nil {
		r.t.Fatalf("write %q: %v (the server is gone)", line, err)
	}
}

func (r *rawMCP) recv() map[string]any {
	r.t.Helper()
	line, err := r.out.ReadString('\n')
	if err != nil {
		r.t.Fatalf("read: %v (the session ended)", err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		r.t.Fatalf("stdout line is not JSON: %q", line)
	}
	return m
}

// TestMCPMalformedInputStdio: malformed lines get JSON-RPC errors from
// the real binary and the session goes on (it used to exit 125 at the
// first one, answering nothing).
func TestMCPMalformedInputStdio(t *testing.T) {
	a := newAK(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := a.cmd(ctx, "mcp-server")
	in, _ := cmd.StdinPipe()
	outPipe, _ := cmd.StdoutPipe()
	var stderr lockedBuf
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &rawMCP{t: t, in: in, out: bufio.NewReaderSize(outPipe, 1<<20)}
	r.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m := r.recv(); m["id"] != float64(1) || m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for _, c := range []struct {
		line string
		code float64
		id   any
	}{
		{`garbage line`, -32700, nil},
		{`{}`, -32600, nil},
		{`[]`, -32600, nil},
		{`42`, -32600, nil},
		{`{"jsonrpc":"1.0","id":2,"method":"tools/list"}`, -32600, float64(2)},
		{`{"jsonrpc":"2.0","id":3,"method":"tools/li`, -32700, nil},
		{`{"jsonrpc":"2.0","id":4,"method":5}`, -32600, float64(4)},
		{`{"jsonrpc":"2.0","id":[4],"method":"ping"}`, -32600, nil},
	} {
		r.send(c.line)
		m := r.recv()
		e, _ := m["error"].(map[string]any)
		if e == nil || e["code"] != c.code || m["id"] != c.id || m["jsonrpc"] != "2.0" {
			t.Errorf("%q: answered %v, want code %v id %v", c.line, m, c.code, c.id)
		}
	}
	r.send("")
	r.send(`{"jsonrpc":"2.0","id":"after","method":"tools/list"}  `)
	m := r.recv()
	res, _ := m["result"].(map[string]any)
	if tools, _ := res["tools"].([]any); m["id"] != "after" || len(tools) != 9 {
		t.Fatalf("tools/list after the malformed lines: %v", m)
	}
	r.send(`{"jsonrpc":"2.0","id":"run","method":"tools/call","params":{"name":"sandbox_run","arguments":{"command":["echo","still here"],"image":"host"}}}`)
	if b, _ := json.Marshal(r.recv()); !strings.Contains(string(b), `still here\n`) {
		t.Errorf("sandbox_run after the malformed lines: %s", b)
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("mcp-server: %v\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "session ended with error") {
		t.Errorf("stderr: %s", stderr.String())
	}
}

// TestMCPMalformedInputHTTP: /mcp on a real serve answers the same inputs
// with 400 and a JSON-RPC error, and the session goes on.
func TestMCPMalformedInputHTTP(t *testing.T) {
	a := newAK(t)
	url := serveIn(t, a, "--api-key", "k")
	post := func(body, session string) (int, http.Header, map[string]any) {
		req, _ := http.NewRequest("POST", url+"/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			if err := json.Unmarshal(b, &m); err != nil {
				t.Errorf("%q: body %q", body, b)
			}
		}
		return resp.StatusCode, resp.Header, m
	}
	status, h, _ := post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, "")
	sid := h.Get("Mcp-Session-Id")
	if status != 200 || sid == "" {
		t.Fatalf("initialize: %d", status)
	}
	post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, sid)
	for _, c := range []struct {
		body string
		code float64
	}{
		{`garbage line`, -32700}, {`{}`, -32600}, {`[]`, -32600}, {`42`, -32600},
		{`{"jsonrpc":"1.0","id":2,"method":"tools/list"}`, -32600}, {`{"jsonrpc":"2.0","id":3,"method":"tools/li`, -32700},
	} {
		status, _, m := post(c.body, sid)
		e, _ := m["error"].(map[string]any)
		if status != 400 || e == nil || e["code"] != c.code {
			t.Errorf("%q: %d %v, want 400 with code %v", c.body, status, m, c.code)
		}
	}
	sess := mcpHTTPSession(t, url, "k")
	if res, err := sess.ListTools(context.Background(), nil); err != nil || len(res.Tools) != 9 {
		t.Fatalf("tools/list after the malformed bodies: %v", err)
	}
}

// TestCommandRulesEverywhere: [security.commands] refuses a command on
// every path that starts one: run (direct and through the daemon's warm
// pool), CLI exec and attach, HTTP exec and run, MCP sandbox_exec and
// sandbox_run; a persistent sandbox keeps the rules it was created with.
func TestCommandRulesEverywhere(t *testing.T) {
	testenv.RequireRoot(t)
	a, ref := withRegistry(t)
	cfg := filepath.Join(a.dir, "agentkernel.toml")
	if err := os.WriteFile(cfg, []byte("[security.commands]\nblock = [\"wget\", \"/bin/cat\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	where := cfg + ":2"
	refused := func(what string, r result) {
		t.Helper()
		if r.code != 126 || !strings.Contains(r.stderr, "is blocked by [security.commands] block") || !strings.Contains(r.stderr, where) || r.stdout != "" {
			t.Errorf("%s: %v; want exit 126 naming the rule and %s", what, r, where)
		}
	}

	refused("run wget", a.run("run", "--no-daemon", "--image", ref, "--", "wget", "-q", "http://127.0.0.1:1/"))
	refused("run /bin/cat", a.run("run", "--no-daemon", "--image", ref, "--", "/bin/cat", "/etc/agentkernel-test"))
	if r := a.run("run", "--no-daemon", "--image", ref, "--", "sh", "-c", "echo allowed"); r.code != 0 || r.stdout != "allowed\n" {
		t.Errorf("allowed run: %v", r)
	}

	// A persistent sandbox takes the rules in force when it is created.
	a.must("sandbox", "create", "box", "--image", ref, "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "box") })
	refused("exec wget", a.run("exec", "box", "--", "wget", "-q", "http://127.0.0.1:1/"))
	refused("exec /bin/cat", a.run("exec", "box", "--", "/bin/cat", "/etc/agentkernel-test"))
	if r := a.run("exec", "box", "--", "cat", "/etc/agentkernel-test"); r.code != 0 || r.stdout != "registry\n" {
		t.Errorf("exec cat (blocked by full path only): %v", r)
	}
	if es := a.audit("--sandbox", "box"); len(es) < 3 || es[len(es)-2].ExitCode == nil || *es[len(es)-2].ExitCode != 126 || !strings.Contains(es[len(es)-2].Error, "blocked") {
		t.Errorf("audit of the refused exec: %+v", es)
	}

	// New rules block the shell: a new sandbox refuses attach; box keeps
	// its own.
	if err := os.WriteFile(cfg, []byte("[security.commands]\nblock = [\"sh\", \"bash\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.must("sandbox", "create", "shellless", "--image", ref, "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "shellless") })
	a.stdin = "exit 0\n" // should the shell start after all
	r := a.run("attach", "shellless")
	a.stdin = ""
	if r.code != 126 || !strings.Contains(r.stderr, `"/bin/sh" is blocked`) {
		t.Errorf("attach with sh blocked: %v", r)
	}
	if r := a.run("exec", "box", "--", "sh", "-c", "echo box keeps its rules"); r.code != 0 || r.stdout != "box keeps its rules\n" {
		t.Errorf("exec sh in box: %v", r)
	}
	refused("exec wget after the config changed", a.run("exec", "box", "--", "wget"))
	if err := os.WriteFile(cfg, []byte("[security.commands]\nblock = [\"wget\", \"/bin/cat\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// HTTP: exec and run answer 409 with exit_code 126 and the rule.
	url := serveIn(t, a, "--api-key", "rules-key")
	post := func(path, body string) (int, map[string]any) {
		req, _ := http.NewRequest("POST", url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer rules-key")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	refusedHTTP := func(path, body string) {
		t.Helper()
		status, m := post(path, body)
		if msg, _ := m["error"].(string); status != 409 || m["exit_code"] != float64(126) || !strings.Contains(msg, "blocked by [security.commands]") || m["success"] != false {
			t.Errorf("POST %s %s: %d %v", path, body, status, m)
		}
	}
	metric := func(prefix string) int {
		req, _ := http.NewRequest("GET", url+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer rules-key")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		n := 0
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, prefix) {
				v, _ := strconv.Atoi(line[strings.LastIndexByte(line, ' ')+1:])
				n += v
			}
		}
		return n
	}
	refusedHTTP("/sandboxes/box/exec", `{"command":["wget","-q","http://127.0.0.1:1/"]}`)
	refusedHTTP("/run", `{"command":["wget"],"image":"`+ref+`"}`)
	// With a warm sandbox of the same spec ready (an allowed fast run
	// creates the pool, which fills in the background), a fast run is
	// still refused.
	if status, m := post("/run", `{"command":["true"],"image":"`+ref+`"}`); status != 200 {
		t.Errorf("allowed fast run: %d %v", status, m)
	}
	waitUntil(t, "warm sandbox in /metrics", func() bool { return metric("agentkernel_pool_warm_sandboxes{") > 0 })
	refusedHTTP("/run", `{"command":["wget"],"image":"`+ref+`"}`)
	refusedHTTP("/run", `{"command":["/bin/cat"],"image":"`+ref+`","fast":false}`)
	if status, m := post("/sandboxes/box/exec", `{"command":["sh","-c","echo ok"]}`); status != 200 || m["data"].(map[string]any)["output"] != "ok\n" {
		t.Errorf("allowed HTTP exec: %d %v", status, m)
	}

	// MCP: isError results that name the rule.
	s := mcpSession(t, a, nil)
	for tool, args := range map[string]map[string]any{
		"sandbox_exec": {"name": "box", "command": []string{"wget"}},
		"sandbox_run":  {"command": []string{"/bin/cat", "/etc/agentkernel-test"}, "image": ref},
	} {
		text, isErr := call(t, s, tool, args)
		if !isErr || !strings.Contains(text, "blocked by [security.commands]") || !strings.Contains(text, "126") || strings.Contains(text, "registry") {
			t.Errorf("%s: %q (isError %v)", tool, text, isErr)
		}
	}
	if out := mustCall(t, s, "sandbox_exec", map[string]any{"name": "box", "command": []string{"cat", "/etc/agentkernel-test"}}); out != "registry\n" {
		t.Errorf("allowed MCP exec: %q", out)
	}

	// Through the daemon: the same refusal as a direct run, before the
	// spec has a pool and with a warm sandbox of it ready (an allowed run
	// through the daemon creates the pool, which fills in the
	// background).
	a.must("daemon", "start")
	t.Cleanup(func() { a.run("daemon", "stop") })
	direct := a.run("run", "--no-daemon", "--image", ref, "--", "wget")
	same := func(what string, got result) {
		t.Helper()
		if got.code != direct.code || got.stderr != direct.stderr || got.stdout != direct.stdout {
			t.Errorf("%s: %v\ndirect: %v", what, got, direct)
		}
	}
	same("daemon run, no pool", a.run("run", "--image", ref, "--", "wget"))
	if r := a.run("run", "--image", ref, "--", "true"); r.code != 0 {
		t.Errorf("allowed daemon run: %v", r)
	}
	waitUntil(t, "warm sandbox in the daemon's pool", func() bool {
		r := a.run("daemon", "status", "--json")
		var st struct{ Pools []struct{ Ready int } }
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("daemon status --json: %v %v", r, err)
		}
		return len(st.Pools) > 0 && st.Pools[0].Ready > 0
	})
	same("daemon run, warm sandbox ready", a.run("run", "--image", ref, "--", "wget"))
	refused("run wget through the daemon", a.run("run", "--image", ref, "--", "wget"))
}

// waitUntil polls cond for up to 30 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 30 s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpSession starts `agentkernel mcp-server` (or the `mcp server`
// spelling) in a's project directory and connects the official SDK client
// to it over a command transport.
func mcpSession(t *testing.T, a *ak, opts *sdk.ClientOptions, args ...string) *sdk.ClientSession {
	t.Helper()
	if len(args) == 0 {
		args = []string{"mcp-server"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	t.Cleanup(cancel)
	cmd := a.cmd(context.Background(), args...)
	cmd.Stderr = os.Stderr
	client := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, opts)
	s, err := client.Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: time.Second}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// call calls a tool and returns its text and isError.
func call(t *testing.T, s *sdk.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: protocol error %v", name, args, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

func mustCall(t *testing.T, s *sdk.ClientSession, name string, args map[string]any) string {
	t.Helper()
	text, isErr := call(t, s, name, args)
	if isErr {
		t.Fatalf("%s %v: error result: %s", name, args, text)
	}
	return text
}

func TestMCPInitializeAndTools(t *testing.T) {
	a := newAK(t)
	s := mcpSession(t, a, nil)
	init := s.InitializeResult()
	if init.ServerInfo.Name != "agentkernel" || init.Capabilities.Tools == nil {
		t.Fatalf("initialize: %+v", init)
	}
	res, err := s.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"sandbox_run": {"command"}, "sandbox_create": {"name"}, "sandbox_exec": {"name", "command"},
		"sandbox_list": nil, "sandbox_remove": {"name"}, "sandbox_file_write": {"name", "path", "content"},
		"sandbox_file_read": {"name", "path"}, "sandbox_start": {"name"}, "sandbox_stop": {"name"},
	}
	if len(res.Tools) != len(want) {
		t.Fatalf("%d tools, want %d", len(res.Tools), len(want))
	}
	for _, tool := range res.Tools {
		req, ok := want[tool.Name]
		if !ok {
			t.Errorf("unexpected tool %s", tool.Name)
			continue
		}
		b, _ := json.Marshal(tool.InputSchema)
		var schema struct {
			Type       string                     `json:"type"`
			Required   []string                   `json:"required"`
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(b, &schema); err != nil || schema.Type != "object" {
			t.Errorf("%s: schema %s", tool.Name, b)
		}
		slices.Sort(req)
		slices.Sort(schema.Required)
		if !slices.Equal(req, schema.Required) {
			t.Errorf("%s: required %v, want %v", tool.Name, schema.Required, req)
		}
		if c, ok := schema.Properties["command"]; ok {
			var cs struct {
				Type  string `json:"type"`
				Items struct {
					Type string `json:"type"`
				} `json:"items"`
			}
			if json.Unmarshal(c, &cs) != nil || cs.Type != "array" || cs.Items.Type != "string" {
				t.Errorf("%s: command schema %s", tool.Name, c)
			}
		}
	}
	for _, p := range []string{"image", "fast", "cwd", "env", "timeout_ms", "profile", "network", "compatibility_mode"} {
		var run *sdk.Tool
		for _, tool := range res.Tools {
			if tool.Name == "sandbox_run" {
				run = tool
			}
		}
		b, _ := json.Marshal(run.InputSchema)
		if !strings.Contains(string(b), `"`+p+`"`) {
			t.Errorf("sandbox_run lacks %s: %s", p, b)
		}
	}
	// Unknown tool and bad arguments are error results, not protocol errors.
	if text, isErr := call(t, s, "no_such_tool", nil); !isErr || !strings.Contains(text, "Unknown tool") {
		t.Errorf("unknown tool: %q %v", text, isErr)
	}
	if text, isErr := call(t, s, "sandbox_run", map[string]any{"command": "ls"}); !isErr {
		t.Errorf("string command: %q", text)
	}
	if text, isErr := call(t, s, "sandbox_run", map[string]any{}); !isErr {
		t.Errorf("no command: %q", text)
	}
}

func TestMCPRun(t *testing.T) {
	a, ref := withRegistry(t)
	if err := os.WriteFile(filepath.Join(a.dir, "marker"), []byte("from-server-dir\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := mcpSession(t, a, nil, "mcp", "server")

	if out := mustCall(t, s, "sandbox_run", map[string]any{"command": []string{"echo", "hi"}, "image": ref}); out != "hi\n" {
		t.Errorf("echo: %q", out)
	}
	if out := mustCall(t, s, "sandbox_run", map[string]any{"command": []string{"sh", "-c", "echo out; echo err >&2; cat /etc/agentkernel-test"}, "image": ref}); out != "out\nerr\nregistry\n" {
		t.Errorf("sh -c: %q", out)
	}
	text, isErr := call(t, s, "sandbox_run", map[string]any{"command": []string{"sh", "-c", "echo partial; exit 3"}, "image": ref})
	if !isErr || !strings.Contains(text, "code 3") || !strings.Contains(text, "partial") {
		t.Errorf("exit 3: %q %v", text, isErr)
	}
	// cwd: the default is the server's directory, else the named one
	// (below it: mcp_security_test.go has the rule); both at /workspace.
	if out := mustCall(t, s, "sandbox_run", map[string]any{"command": []string{"cat", "/workspace/marker"}, "image": ref}); out != "from-server-dir\n" {
		t.Errorf("default cwd: %q", out)
	}
	other := filepath.Join(a.dir, "other")
	os.Mkdir(other, 0o755)
	os.WriteFile(filepath.Join(other, "marker"), []byte("from-cwd\n"), 0o644)
	if out := mustCall(t, s, "sandbox_run", map[string]any{"command": []string{"sh", "-c", "pwd; cat marker"}, "image": ref, "cwd": other}); out != "/workspace\nfrom-cwd\n" {
		t.Errorf("cwd: %q", out)
	}
	// moderate (default) is copy-on-write: the host file is untouched.
	mustCall(t, s, "sandbox_run", map[string]any{"command": []string{"sh", "-c", "echo changed > /workspace/marker"}, "image": ref, "cwd": other})
	if b, _ := os.ReadFile(filepath.Join(other, "marker")); string(b) != "from-cwd\n" {
		t.Errorf("moderate changed the host: %q", b)
	}
	if out := mustCall(t, s, "sandbox_run", map[string]any{"command": []string{"sh", "-c", "echo $FOO-$BAR"}, "image": ref, "env": map[string]string{"FOO": "a b", "BAR": "2"}}); out != "a b-2\n" {
		t.Errorf("env: %q", out)
	}
	if out := mustCall(t, s, "sandbox_run", map[string]any{"command": []string{"sh", "-c", "test -e /workspace/marker && echo visible || echo hidden"}, "image": ref, "cwd": other, "profile": "restrictive"}); out != "hidden\n" {
		t.Errorf("restrictive shows the project: %q", out)
	}
	start := time.Now()
	text, isErr = call(t, s, "sandbox_run", map[string]any{"command": []string{"sleep", "20"}, "image": ref, "timeout_ms": 500})
	if !isErr || !strings.Contains(text, "124") || time.Since(start) > 10*time.Second {
		t.Errorf("timeout: %q %v after %s", text, isErr, time.Since(start))
	}
	// network:true gives the sandbox its network device; false, loopback
	// only (even for an agent mode, whose network is on by default).
	if out := mustCall(t, s, "sandbox_run", map[string]any{"command": []string{"sh", "-c", "grep -c eth0: /proc/net/dev"}, "image": ref, "network": true, "profile": "restrictive"}); out != "1\n" {
		t.Errorf("network:true: %q", out)
	}
	if out := mustCall(t, s, "sandbox_run", map[string]any{"command": []string{"sh", "-c", "grep -c eth0: /proc/net/dev; true"}, "image": ref, "network": false, "compatibility_mode": "claude"}); out != "0\n" {
		t.Errorf("network:false: %q", out)
	}
	text, isErr = call(t, s, "sandbox_run", map[string]any{"command": []string{"no-such-command"}, "image": ref})
	if !isErr || !strings.Contains(text, "127") {
		t.Errorf("missing command: %q %v", text, isErr)
	}
}

func TestMCPProgress(t *testing.T) {
	a, ref := withRegistry(t)
	var mu sync.Mutex
	var msgs []string
	s := mcpSession(t, a, &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
		mu.Lock()
		msgs = append(msgs, r.Params.Message)
		mu.Unlock()
	}})
	params := &sdk.CallToolParams{Name: "sandbox_run", Arguments: map[string]any{"command": []string{"sh", "-c", "echo one; sleep 1.5; echo two"}, "image": ref}}
	params.SetProgressToken("tok")
	res, err := s.CallTool(context.Background(), params)
	if err != nil || res.IsError {
		t.Fatalf("%v %+v", err, res)
	}
	// The client may run notification handlers after CallTool returns.
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		all := strings.Join(msgs, "")
		mu.Unlock()
		if strings.Contains(all, "one") && strings.Contains(all, "two") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("progress messages %q", all)
		}
	}
}

func TestMCPPersistentCycle(t *testing.T) {
	a, ref := withRegistry(t)
	s := mcpSession(t, a, nil)
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "mcpbox") })

	if out := mustCall(t, s, "sandbox_list", nil); out != "No sandboxes found." {
		t.Errorf("empty list: %q", out)
	}
	if out := mustCall(t, s, "sandbox_create", map[string]any{"name": "mcpbox", "image": ref}); !strings.Contains(out, "created and started") {
		t.Errorf("create: %q", out)
	}
	if text, isErr := call(t, s, "sandbox_create", map[string]any{"name": "mcpbox", "image": ref}); !isErr || !strings.Contains(text, "already exists") {
		t.Errorf("second create: %q", text)
	}
	if out := mustCall(t, s, "sandbox_list", nil); !strings.Contains(out, "mcpbox") || !strings.Contains(out, "running") {
		t.Errorf("list: %q", out)
	}
	if out := mustCall(t, s, "sandbox_exec", map[string]any{"name": "mcpbox", "command": []string{"cat", "/etc/agentkernel-test"}}); out != "registry\n" {
		t.Errorf("exec: %q", out)
	}
	if text, isErr := call(t, s, "sandbox_exec", map[string]any{"name": "mcpbox", "command": []string{"sh", "-c", "echo bad; exit 4"}}); !isErr || !strings.Contains(text, "code 4") || !strings.Contains(text, "bad") {
		t.Errorf("exec exit 4: %q %v", text, isErr)
	}
	if out := mustCall(t, s, "sandbox_file_write", map[string]any{"name": "mcpbox", "path": "/data/hello.txt", "content": "héllo\n"}); !strings.Contains(out, "Wrote 7 bytes") {
		t.Errorf("write: %q", out)
	}
	if out := mustCall(t, s, "sandbox_file_read", map[string]any{"name": "mcpbox", "path": "/data/hello.txt"}); out != "héllo\n" {
		t.Errorf("read: %q", out)
	}
	mustCall(t, s, "sandbox_exec", map[string]any{"name": "mcpbox", "command": []string{"sh", "-c", "printf '\\377\\376' > /tmp/bin"}})
	if out := mustCall(t, s, "sandbox_file_read", map[string]any{"name": "mcpbox", "path": "/tmp/bin"}); out != "[binary file, 2 bytes, base64 encoded]\n//4=" {
		t.Errorf("binary read: %q", out)
	}
	if out := mustCall(t, s, "sandbox_stop", map[string]any{"name": "mcpbox"}); !strings.Contains(out, "stopped") {
		t.Errorf("stop: %q", out)
	}
	if out := mustCall(t, s, "sandbox_stop", map[string]any{"name": "mcpbox"}); !strings.Contains(out, "already stopped") {
		t.Errorf("second stop: %q", out)
	}
	if text, isErr := call(t, s, "sandbox_file_read", map[string]any{"name": "mcpbox", "path": "/data/hello.txt"}); !isErr || !strings.Contains(text, "not running") {
		t.Errorf("read while stopped: %q", text)
	}
	if out := mustCall(t, s, "sandbox_start", map[string]any{"name": "mcpbox"}); !strings.Contains(out, "started") {
		t.Errorf("start: %q", out)
	}
	if out := mustCall(t, s, "sandbox_start", map[string]any{"name": "mcpbox"}); !strings.Contains(out, "already running") {
		t.Errorf("second start: %q", out)
	}
	if out := mustCall(t, s, "sandbox_exec", map[string]any{"name": "mcpbox", "command": []string{"cat", "/data/hello.txt"}}); out != "héllo\n" {
		t.Errorf("file after restart: %q", out)
	}
	if out := mustCall(t, s, "sandbox_remove", map[string]any{"name": "mcpbox"}); !strings.Contains(out, "removed") {
		t.Errorf("remove: %q", out)
	}
	for _, tool := range []string{"sandbox_start", "sandbox_stop", "sandbox_remove"} {
		if text, isErr := call(t, s, tool, map[string]any{"name": "mcpbox"}); !isErr || !strings.Contains(text, "not found") {
			t.Errorf("%s after remove: %q %v", tool, text, isErr)
		}
	}
	// The audit log names the MCP face.
	if r := a.must("audit", "--sandbox", "mcpbox", "--json"); !strings.Contains(r.stdout, "via mcp") {
		t.Errorf("audit: %s", r.stdout)
	}
}

// TestMCPRawProtocol speaks raw JSON-RPC over stdio: unknown methods are
// -32601 and stdout carries nothing but protocol lines.
func TestMCPRawProtocol(t *testing.T) {
	a := newAK(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := a.cmd(ctx, "mcp-server")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer in.Close()
	send := func(s string) {
		if _, err := in.Write([]byte(s + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"no/such/method","params":{}}`)
	send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"command":["echo","raw"],"image":"host"}}}`)
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	got := map[float64]map[string]any{}
	for len(got) < 3 && sc.Scan() {
		var msg map[string]any
		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil {
			t.Fatalf("stdout line is not JSON-RPC: %q", sc.Text())
		}
		if id, ok := msg["id"].(float64); ok {
			got[id] = msg
		}
	}
	e, _ := got[2]["error"].(map[string]any)
	if e == nil || e["code"] != float64(-32601) {
		t.Errorf("unknown method: %v", got[2])
	}
	b, _ := json.Marshal(got[3])
	if !strings.Contains(string(b), `"text":"raw\n"`) || strings.Contains(string(b), `"isError":true`) {
		t.Errorf("echo raw: %s", b)
	}
	in.Close()
	_ = exec.Command("true").Run()
}

func TestPluginInstallCLI(t *testing.T) {
	a := newAK(t)
	mcpJSON := filepath.Join(a.dir, ".mcp.json")
	orig := `{"mcpServers": {"other": {"command": "x"}}}`
	os.WriteFile(mcpJSON, []byte(orig), 0o644)

	r := a.must("plugin", "install", "claude", "--dry-run")
	if !strings.Contains(r.stdout, "would be merged") || !strings.Contains(r.stdout, "+ mcpServers.agentkernel") {
		t.Errorf("dry run: %v", r)
	}
	if b, _ := os.ReadFile(mcpJSON); string(b) != orig {
		t.Fatalf("dry run wrote: %s", b)
	}
	if _, err := os.Stat(filepath.Join(a.dir, ".claude")); err == nil {
		t.Fatal("dry run created .claude")
	}
	r = a.must("plugin", "install", "claude")
	if !strings.Contains(r.stdout, "merged") || !strings.Contains(r.stdout, "created") {
		t.Errorf("install: %v", r)
	}
	var m struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	b, _ := os.ReadFile(mcpJSON)
	if err := json.Unmarshal(b, &m); err != nil || m.MCPServers["other"].Command != "x" || m.MCPServers["agentkernel"].Command != binary ||
		!slices.Equal(m.MCPServers["agentkernel"].Args, []string{"mcp-server"}) {
		t.Errorf(".mcp.json: %v %s", err, b)
	}
	r = a.must("plugin", "install", "claude")
	if strings.Count(r.stdout, "already installed") != 3 {
		t.Errorf("second install: %v", r)
	}
	r = a.must("plugin", "install", "codex", "--global")
	if _, err := os.Stat(filepath.Join(a.home, ".codex", "config.toml")); err != nil {
		t.Errorf("codex --global: %v %v", err, r)
	}
	r = a.must("plugin", "list")
	if !strings.Contains(r.stdout, "claude    installed") {
		t.Errorf("list: %v", r)
	}
	os.WriteFile(filepath.Join(a.dir, ".gemini"), nil, 0o644) // a file where a directory must be
	if r = a.run("plugin", "install", "gemini"); r.code != 125 {
		t.Errorf("unwritable gemini: %v", r)
	}
	if r = a.run("plugin", "install", "cursor"); r.code != 125 || !strings.Contains(r.stderr, "unknown target") {
		t.Errorf("unknown target: %v", r)
	}
	// agents: the plugin shows as installed; nothing is on the test PATH.
	a.env = append(a.env, "OPENAI_API_KEY=sk-test")
	r = a.must("agents", "--json")
	var rows []struct {
		Binary        string `json:"binary"`
		APIKey        string `json:"api_key"`
		PluginProject bool   `json:"plugin_project"`
		PluginGlobal  bool   `json:"plugin_global"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 4 {
		t.Fatalf("agents: %v %v", err, r)
	}
	if !rows[0].PluginProject || rows[1].APIKey != "set (OPENAI_API_KEY)" || !rows[1].PluginGlobal || rows[2].APIKey != "missing" || rows[3].APIKey != "n/a" {
		t.Errorf("agents: %+v", rows)
	}
	if r = a.must("agents"); !strings.Contains(r.stdout, "Claude Code") {
		t.Errorf("agents table: %v", r)
	}
}

// TestMCPStdinClosedEarly: a client may write its requests and close
// stdin at once; the answers of the tool calls in flight still come.
func TestMCPStdinClosedEarly(t *testing.T) {
	a := newAK(t)
	a.stdin = strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":"late","method":"tools/call","params":{"name":"sandbox_run","arguments":{"command":["sh","-c","sleep 1; echo late"],"image":"host"}}}`,
	}, "\n") + "\n"
	r := a.run("mcp-server")
	if r.code != 0 {
		t.Fatalf("mcp-server: %v", r)
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var msg map[string]any
		if err := json.Unmarshal([]byte(line), &msg); err != nil {
			t.Fatalf("stdout line is not JSON-RPC: %q", line)
		}
		if msg["id"] == "late" {
			b, _ := json.Marshal(msg)
			found = strings.Contains(string(b), `late\n`) && !strings.Contains(string(b), `"isError":true`)
		}
	}
	if !found {
		t.Errorf("no answer to the tool call in flight when stdin closed:\n%s\nstderr: %s", r.stdout, r.stderr)
	}
}

//go:build linux

package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// bearer adds an API key to every request of the MCP client.
type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPOverServe runs the MCP checks over streamable HTTP at /mcp on a
// real `serve` process, behind the API's authentication.
func TestMCPOverServe(t *testing.T) {
	s := startAPI(t, "--api-key", "mcp-key")

	// Without the key the endpoint answers 401 like every API route.
	resp, err := http.Post(s.url+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/mcp without a key: status %d, want 401", resp.StatusCode)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := sdk.NewClient(&sdk.Implementation{Name: "e2e-http", Version: "1"}, nil)
	sess, err := client.Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint:   s.url + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{"mcp-key"}},
		MaxRetries: -1,
	}, nil)
	if err != nil {
		t.Fatalf("connect to /mcp: %v", err)
	}
	defer sess.Close()
	if got := sess.InitializeResult().ServerInfo.Name; got != "agentkernel" {
		t.Errorf("serverInfo.name = %q", got)
	}
	tools, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) != 9 {
		t.Errorf("tools/list over HTTP: %d tools, want 9", len(tools.Tools))
	}

	if out := mustCall(t, sess, "sandbox_run", map[string]any{"command": []string{"echo", "hi"}, "image": "host"}); out != "hi\n" {
		t.Errorf("sandbox_run echo: %q", out)
	}
	if text, isErr := call(t, sess, "sandbox_run", map[string]any{"command": []string{"sh", "-c", "echo out; exit 5"}, "image": "host"}); !isErr || !strings.Contains(text, "5") || !strings.Contains(text, "out") {
		t.Errorf("non-zero exit must be an isError result with the output: %q %v", text, isErr)
	}
	// cwd, env and timeout_ms are honoured over HTTP too.
	proj := filepath.Join(s.a.dir, "proj") // the server's project directory or below it
	os.Mkdir(proj, 0o755)
	if err := os.WriteFile(filepath.Join(proj, "marker"), []byte("from-cwd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := mustCall(t, sess, "sandbox_run", map[string]any{"command": []string{"sh", "-c", "pwd; cat marker; echo $FOO"}, "image": "host", "cwd": proj, "env": map[string]string{"FOO": "bar"}}); out != "/workspace\nfrom-cwd\nbar\n" {
		t.Errorf("cwd/env: %q", out)
	}
	start := time.Now()
	if text, isErr := call(t, sess, "sandbox_run", map[string]any{"command": []string{"sleep", "20"}, "image": "host", "timeout_ms": 500}); !isErr || time.Since(start) > 10*time.Second {
		t.Errorf("timeout_ms: %q %v after %v", text, isErr, time.Since(start))
	}
	if text, isErr := call(t, sess, "no_such_tool", nil); !isErr {
		t.Errorf("unknown tool must be an isError result: %q", text)
	}

	// The persistent cycle.
	t.Cleanup(func() { s.a.run("sandbox", "rm", "--force", "httpbox") })
	mustCall(t, sess, "sandbox_create", map[string]any{"name": "httpbox", "image": "host"})
	if out := mustCall(t, sess, "sandbox_exec", map[string]any{"name": "httpbox", "command": []string{"sh", "-c", "echo in-box"}}); out != "in-box\n" {
		t.Errorf("exec: %q", out)
	}
	mustCall(t, sess, "sandbox_file_write", map[string]any{"name": "httpbox", "path": "/tmp/x.txt", "content": "over http\n"})
	if out := mustCall(t, sess, "sandbox_file_read", map[string]any{"name": "httpbox", "path": "/tmp/x.txt"}); out != "over http\n" {
		t.Errorf("file read: %q", out)
	}
	mustCall(t, sess, "sandbox_stop", map[string]any{"name": "httpbox"})
	mustCall(t, sess, "sandbox_start", map[string]any{"name": "httpbox"})
	if out := mustCall(t, sess, "sandbox_list", nil); !strings.Contains(out, "httpbox") {
		t.Errorf("list: %q", out)
	}
	mustCall(t, sess, "sandbox_remove", map[string]any{"name": "httpbox"})
	if _, isErr := call(t, sess, "sandbox_exec", map[string]any{"name": "httpbox", "command": []string{"true"}}); !isErr {
		t.Error("exec after remove must be an isError result")
	}
}

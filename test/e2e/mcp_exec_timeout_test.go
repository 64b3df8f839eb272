//go:build linux

package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPExecTimeout: sandbox_exec's timeout_ms kills the command and
// says so (exit code 124), as sandbox_run's does.
func TestMCPExecTimeout(t *testing.T) {
	s := startAPI(t, "--api-key", "mcp-key")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sess, err := sdk.NewClient(&sdk.Implementation{Name: "e2e-timeout", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint: s.url + "/mcp", HTTPClient: &http.Client{Transport: bearer{"mcp-key"}}, MaxRetries: -1,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	t.Cleanup(func() { s.a.run("sandbox", "rm", "--force", "mcptimeout") })
	mustCall(t, sess, "sandbox_create", map[string]any{"name": "mcptimeout", "image": "host"})
	start := time.Now()
	text, isErr := call(t, sess, "sandbox_exec", map[string]any{"name": "mcptimeout", "command": []string{"sh", "-c", "echo begun; exec sleep 4949"}, "timeout_ms": 500})
	if !isErr || !strings.Contains(text, "timed out after 500ms") || !strings.Contains(text, "exit code 124") || !strings.Contains(text, "begun") || time.Since(start) > 15*time.Second {
		t.Errorf("timeout_ms: %q %v after %v", text, isErr, time.Since(start))
	}
	if out := mustCall(t, sess, "sandbox_exec", map[string]any{"name": "mcptimeout", "command": []string{"sh", "-c", `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f; echo; done`}}); strings.Contains(out, "sleep 4949") {
		t.Errorf("the timed-out command still runs:\n%s", out)
	}
	if text, isErr := call(t, sess, "sandbox_exec", map[string]any{"name": "mcptimeout", "command": []string{"true"}, "timeout_ms": -1}); !isErr || !strings.Contains(text, "timeout_ms") {
		t.Errorf("negative timeout_ms: %q %v", text, isErr)
	}
	if out := mustCall(t, sess, "sandbox_exec", map[string]any{"name": "mcptimeout", "command": []string{"echo", "quick"}, "timeout_ms": 30000}); out != "quick\n" {
		t.Errorf("within the timeout: %q", out)
	}
}

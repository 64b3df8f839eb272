package mcp

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// connect runs the server in-process over the SDK's in-memory transport.
func connect(t *testing.T) *sdk.ClientSession {
	t.Helper()
	ctx := context.Background()
	s := NewServer(Options{Manager: sandbox.NewManager(sandbox.ManagerOptions{}), Dir: t.TempDir(), Version: "test"})
	st, ct := sdk.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callText(t *testing.T, cs *sdk.ClientSession, name string, args any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		b.WriteString(c.(*sdk.TextContent).Text)
	}
	return b.String(), res.IsError
}

func TestToolsAndErrors(t *testing.T) {
	cs := connect(t)
	if got := cs.InitializeResult().ServerInfo; got.Name != "agentkernel" || got.Version != "test" {
		t.Errorf("serverInfo %+v", got)
	}
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(res.Tools) != 9 {
		t.Fatalf("tools: %v %d", err, len(res.Tools))
	}
	for _, c := range []struct {
		name string
		args any
		want string
	}{
		{"nope", nil, "Unknown tool: nope"},
		{"sandbox_run", map[string]any{"command": []string{}}, "command is required"},
		{"sandbox_run", map[string]any{"command": []any{1}}, "validating"},
		{"sandbox_run", map[string]any{"command": []string{"x"}, "cwd": "rel"}, "absolute"},
		{"sandbox_run", map[string]any{"command": []string{"x"}, "profile": "yolo"}, "validating"},
		{"sandbox_run", map[string]any{"command": []string{"x"}, "network": true, "image": "host"}, "network egress"},
		{"sandbox_exec", map[string]any{"name": "bad name", "command": []string{"x"}}, "name"},
		{"sandbox_file_write", map[string]any{"name": "a", "path": "rel", "content": ""}, "absolute"},
		{"sandbox_list", nil, "not available"}, // no persistent-sandbox mechanism wired
	} {
		text, isErr := callText(t, cs, c.name, c.args)
		if !isErr || !strings.Contains(text, c.want) {
			t.Errorf("%s %v: %q (isError %v), want %q", c.name, c.args, text, isErr, c.want)
		}
	}
}

func TestOutputKeepsHeadAndTail(t *testing.T) {
	o := newOutput(context.Background(), nil)
	chunk := strings.Repeat("x", 1000) + "\n"
	o.Write([]byte("FIRST\n"))
	for i := 0; i < 3*maxOutput/len(chunk); i++ {
		o.Write([]byte(chunk))
	}
	o.Write([]byte("LAST\n"))
	s := o.text()
	if !strings.HasPrefix(s, "FIRST\n") || !strings.HasSuffix(s, "LAST\n") || !strings.Contains(s, "bytes of output omitted") || len(s) > maxOutput+200 {
		t.Errorf("len %d, head %q, tail %q", len(s), s[:10], s[len(s)-10:])
	}
}

func TestHTTPHandler(t *testing.T) {
	s := NewServer(Options{Manager: sandbox.NewManager(sandbox.ManagerOptions{}), Dir: t.TempDir()})
	srv := httptest.NewServer(Handler(s, nil))
	defer srv.Close()
	ctx := context.Background()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.ListTools(ctx, nil)
	if err != nil || len(res.Tools) != 9 {
		t.Fatalf("tools over HTTP: %v", err)
	}
	if text, isErr := callText(t, cs, "nope", nil); !isErr || !strings.Contains(text, "Unknown tool") {
		t.Errorf("unknown tool over HTTP: %q", text)
	}
}

package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/api"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestUnixSocket: the client reaches a real API server on a unix socket,
// by option and by AGENTKERNEL_BASE_URL=unix://…, with no key (the
// server's own user), and the same server over TCP wants one.
func TestUnixSocket(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the server reads unix peer credentials on Linux only")
	}
	dir, err := os.MkdirTemp("", "akc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "api.sock")
	uln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := api.New(api.Options{Manager: sandbox.NewManager(sandbox.ManagerOptions{}), Keys: []string{"k"}, Version: "t"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, []net.Listener{uln, tln}, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })

	t.Setenv("AGENTKERNEL_API_KEY", "")
	for name, c := range map[string]*Client{
		"WithUnixSocket":             New(WithUnixSocket(sock)),
		"WithBaseURL unix://":        New(WithBaseURL("unix://" + sock)),
		"WithHTTPClient + unix":      New(WithBaseURL("unix://"+sock), WithHTTPClient(&http.Client{Transport: &http.Transport{}})),
		"WithTimeout after the base": New(WithBaseURL("unix://"+sock), WithTimeout(5*time.Second)),
	} {
		st, err := c.Status(context.Background())
		if err != nil || st.Version != "t" || !st.APIKeyConfigured {
			t.Errorf("%s: %+v %v", name, st, err)
		}
	}
	t.Setenv("AGENTKERNEL_BASE_URL", "unix://"+sock)
	if h, err := New().Health(context.Background()); err != nil || h != "ok" {
		t.Errorf("AGENTKERNEL_BASE_URL=unix://: %q %v", h, err)
	}
	if _, err := New(WithBaseURL("http://" + tln.Addr().String())).Status(context.Background()); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("TCP without a key: %v, want 401", err)
	}
	if _, err := New(WithBaseURL("http://"+tln.Addr().String()), WithAPIKey("k")).Status(context.Background()); err != nil {
		t.Errorf("TCP with the key: %v", err)
	}
}

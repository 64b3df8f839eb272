package client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
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

// recordingTransport is a RoundTripper that is not an *http.Transport
// and counts the requests handed to it.
type recordingTransport struct{ hosts []string }

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rt.hosts = append(rt.hosts, r.URL.Host)
	return nil, errors.New("recordingTransport sends nothing")
}

// TestUnixNeverTCP: a client for a unix socket never makes a request by
// any other way: with an HTTP client whose transport cannot be made to
// dial the socket, or without a socket path, every request fails before
// any transport sees it (it would go over TCP to the host "agentkernel",
// whatever DNS makes of that name).
func TestUnixNeverTCP(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	for name, mk := range map[string]func(rt http.RoundTripper) *Client{
		"WithBaseURL": func(rt http.RoundTripper) *Client {
			return New(WithBaseURL("unix://"+sock), WithHTTPClient(&http.Client{Transport: rt}))
		},
		"WithUnixSocket, then WithHTTPClient": func(rt http.RoundTripper) *Client {
			return New(WithUnixSocket(sock), WithHTTPClient(&http.Client{Transport: rt}))
		},
		"AGENTKERNEL_BASE_URL": func(rt http.RoundTripper) *Client {
			t.Setenv("AGENTKERNEL_BASE_URL", "unix://"+sock)
			defer os.Unsetenv("AGENTKERNEL_BASE_URL")
			return New(WithHTTPClient(&http.Client{Transport: rt}))
		},
	} {
		rt := &recordingTransport{}
		c := mk(rt)
		_, err := c.Health(context.Background())
		if !errors.Is(err, ErrUnixTransport) {
			t.Errorf("%s: %v, want ErrUnixTransport", name, err)
		}
		for range c.RunStream(context.Background(), []string{"true"}, nil) {
			break
		}
		if len(rt.hosts) != 0 {
			t.Errorf("%s: the custom transport was sent requests for %q", name, rt.hosts)
		}
	}
	rt := &recordingTransport{}
	_, err := New(WithBaseURL("unix://"), WithHTTPClient(&http.Client{Transport: &http.Transport{}})).Health(context.Background())
	if err == nil || !strings.Contains(err.Error(), "without a socket path") {
		t.Errorf("unix:// without a path: %v", err)
	}
	_, err = New(WithUnixSocket(""), WithHTTPClient(&http.Client{Transport: rt})).Health(context.Background())
	if err == nil || len(rt.hosts) != 0 {
		t.Errorf("WithUnixSocket(\"\"): %v, requests %q", err, rt.hosts)
	}
	// A TCP base URL keeps the custom transport.
	if _, err := New(WithBaseURL("http://127.0.0.1:1"), WithHTTPClient(&http.Client{Transport: rt})).Health(context.Background()); err == nil || len(rt.hosts) != 1 {
		t.Errorf("TCP with a custom transport: %v, requests %q", err, rt.hosts)
	}
}

// TestUnixSendsKey: over a unix socket the key, when the client has one,
// is sent: the server wants it there from its own user inside a sandbox
// (another user or PID namespace); without one none is sent.
func TestUnixSendsKey(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	auth := make(chan []string, 2)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth <- r.Header.Values("Authorization")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"success":true,"data":"ok"}`)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	t.Setenv("AGENTKERNEL_API_KEY", "")
	if _, err := New(WithUnixSocket(sock), WithAPIKey("k1")).Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := <-auth; len(got) != 1 || got[0] != "Bearer k1" {
		t.Errorf("Authorization over the socket with a key: %q", got)
	}
	if _, err := New(WithUnixSocket(sock)).Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := <-auth; len(got) != 0 {
		t.Errorf("Authorization over the socket without a key: %q", got)
	}
}

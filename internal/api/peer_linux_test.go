package api

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// envPeerClient makes this test binary a client of the unix socket it
// names: it asks GET /status without a key, with the key "k" and with a
// wrong key, prints the three status codes and exits.
const envPeerClient = "AKAPI_TEST_PEER_CLIENT"

func TestMain(m *testing.M) {
	if sock := os.Getenv(envPeerClient); sock != "" {
		os.Exit(peerClient(sock))
	}
	os.Exit(m.Run())
}

func peerClient(sock string) int {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) { return net.Dial("unix", sock) }}}
	var codes []string
	for _, auth := range []string{"", "Bearer k", "Bearer wrong"} {
		req, _ := http.NewRequest("GET", "http://agentkernel/status", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		codes = append(codes, fmt.Sprint(resp.StatusCode))
		if resp.StatusCode != 200 {
			fmt.Fprintf(os.Stderr, "%s\n", b)
		}
	}
	fmt.Println(strings.Join(codes, " "))
	return 0
}

// TestUnixPeerNamespaces: a client of the server's uid goes without a
// key only from the server's own user and PID namespaces. The same
// client in a new user namespace that maps its root to our uid (what a
// rootless sandbox is: SO_PEERCRED reports our uid) or in a new PID
// namespace must send the key: 403 without it or with a wrong one, 200
// with it.
func TestUnixPeerNamespaces(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s, log := guardServer(t, Options{})
	served(t, s, ln)
	client := func(attr *syscall.SysProcAttr) string {
		t.Helper()
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), envPeerClient+"="+sock)
		cmd.SysProcAttr = attr
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			if attr != nil && strings.Contains(err.Error(), "fork/exec") {
				testenv.Missing(t, "starting a client in new namespaces: %v", err)
			}
			t.Fatalf("client: %v\n%s", err, stderr.String())
		}
		if strings.Contains(stderr.String(), "Forbidden") && !strings.Contains(stderr.String(), "another user or PID namespace") {
			t.Errorf("the refusal does not say why:\n%s", stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	if got := client(nil); got != "200 200 200" {
		t.Errorf("our namespaces (no key, key, wrong key): %s, want 200 200 200 (a wrong key is ignored)", got)
	}
	for name, flags := range testenv.OtherNamespaces {
		t.Run(name, func(t *testing.T) {
			attr := testenv.InNamespaces(t, flags)
			if got := client(attr); got != "403 200 403" {
				t.Errorf("new %s namespace (no key, key, wrong key): %s, want 403 200 403", name, got)
			}
		})
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(log.String(), "route=forbidden_peer_ns"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("the access log does not name the refusal:\n%s", log.String())
			break
		}
	}
}

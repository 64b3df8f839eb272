package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/backend/gvisor"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestPoolOtherBackend: the warm pools of another backend than the
// server's own, on the real gvisor backend (runsc): a request naming
// gvisor takes a sandbox of gvisor's pool (a hit), never one of the
// server's own backend, and the other way round; two requests in a row
// see nothing of each other; the pool refills after each take; at
// shutdown nothing of the pool is left (directories, runsc processes,
// mounts).
func TestPoolOtherBackend(t *testing.T) {
	testenv.RequireRoot(t)
	if os.Getenv(gvisor.RunscEnv) == "" {
		if _, err := os.Stat(gvisor.RunscCachePath()); err != nil {
			if _, err := exec.LookPath("runsc"); err != nil {
				testenv.Missing(t, "runsc: set %s or build it with scripts/runsc.sh", gvisor.RunscEnv)
			}
		}
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		testenv.Missing(t, "/bin/busybox: %v (apt-get install busybox-static)", err)
	}
	layer := t.TempDir()
	for _, d := range []string{"bin", "etc", "tmp"} {
		if err := os.Mkdir(filepath.Join(layer, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(layer, "bin/busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"sh", "cat", "ls", "true"} {
		if err := os.Symlink("busybox", filepath.Join(layer, "bin", c)); err != nil {
			t.Fatal(err)
		}
	}
	dataDir := t.TempDir()
	main := &namedBackend{"main"}
	gv := gvisor.New(gvisor.Options{DataDir: dataDir})
	m := sandbox.NewManager(sandbox.ManagerOptions{Backends: []sandbox.Backend{main, gv}, Default: "main"})
	s := New(Options{
		Manager: m,
		Backend: "main",
		Resolve: func(_ context.Context, q RunSpec) (*sandbox.Spec, error) {
			spec := &sandbox.Spec{Args: q.Args, Hostname: "pooltest", Network: sandbox.Network{Mode: sandbox.NetworkNone},
				Security: sandbox.Security{NoNewPrivs: true}}
			spec.Rootfs.Layers = []string{layer}
			return spec, nil
		},
		InsecureNoAuth: true,
	})
	ts := httptest.NewServer(s)
	defer ts.Close()
	closed := false
	defer func() {
		if !closed {
			s.pools.close()
			m.Drain()
		}
	}()
	post := func(body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", ts.URL+"/run", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	ready := func() int {
		n := 0
		for _, ps := range s.pools.sizes() {
			n += ps.ready
		}
		return n
	}
	waitReady := func(want int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for ready() != want {
			if time.Now().After(deadline) {
				t.Fatalf("the pool holds %d ready sandboxes, want %d", ready(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	hits := func() uint64 {
		s.metrics.mu.Lock()
		defer s.metrics.mu.Unlock()
		return s.metrics.poolRuns["hit"]
	}
	spec, _ := s.opts.Resolve(context.Background(), RunSpec{Args: []string{"true"}})
	spec.Backend = "gvisor"
	if err := s.Prewarm(spec, 1); err != nil {
		t.Fatal(err)
	}
	waitReady(1)
	// The server's own backend: never a gvisor sandbox.
	if code, body := post(`{"command":["true"]}`); code != 200 || !strings.Contains(body, "ran on main") {
		t.Fatalf("the server's own backend: %d %s", code, body)
	}
	for i, cmd := range []string{
		`{"command":["sh","-c","ls /tmp; echo left > /tmp/mark; hostname"],"backend":"gvisor"}`,
		`{"command":["sh","-c","ls /tmp; cat /proc/[0-9]*/cmdline | tr '\\0' ' '; hostname"],"backend":"gvisor"}`,
	} {
		before := hits()
		code, body := post(cmd)
		if code != 200 || !strings.Contains(body, "pooltest") || strings.Contains(body, "mark") || strings.Contains(body, "ran on main") {
			t.Fatalf("run %d on gvisor: %d %s", i, code, body)
		}
		if hits() != before+1 {
			t.Errorf("run %d on gvisor did not take a warm sandbox", i)
		}
		// The pool refills.
		waitReady(1)
	}
	s.pools.close()
	m.Drain()
	closed = true
	if left, _ := filepath.Glob(filepath.Join(dataDir, "gvisor", "agentkernel-*")); len(left) > 0 {
		t.Errorf("pooled sandboxes' directories left: %v", left)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, _ := os.ReadFile(p); strings.Contains(string(b), dataDir) {
			t.Errorf("a process of the pool left: %s", strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), dataDir) {
		t.Errorf("mounts of the pool left")
	}
}

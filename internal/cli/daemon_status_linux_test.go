package cli

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/api"
	"github.com/agentkernel/agentkernel/internal/daemon"
	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// counterBackend prepares sandboxes that run nothing: enough for a
// server's pools to fill and serve, which is what daemon status reports.
type counterBackend struct{}

func (counterBackend) Name() string { return "counter" }
func (counterBackend) Run(context.Context, *sandbox.Spec, sandbox.Stdio) (sandbox.Result, error) {
	return sandbox.Result{}, nil
}
func (counterBackend) Prepare(context.Context, *sandbox.Spec) (sandbox.Prepared, error) {
	return counterSandbox{}, nil
}

type counterSandbox struct{}

func (counterSandbox) Run(context.Context, []string, sandbox.Stdio, <-chan os.Signal) (sandbox.Result, error) {
	return sandbox.Result{}, nil
}
func (counterSandbox) Close()             {}
func (counterSandbox) Warnings() []string { return nil }

// TestDaemonStatusReadsStatus: 'daemon status' reads the pools, the runs
// they served and the uptime from a real API server's GET /status on its
// unix socket.
// A pool's image is the client's string: quotes, backslashes and
// newlines in it come back as they were.
func TestDaemonStatusReadsStatus(t *testing.T) {
	p := daemon.PathsFor(t.TempDir())
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	srv := api.New(api.Options{
		Manager: sandbox.NewManager(sandbox.ManagerOptions{Backends: []sandbox.Backend{counterBackend{}}, Default: "counter"}),
		Pool:    api.PoolOptions{MinWarm: 1, MaxWarm: 3},
	})
	ln, err := net.Listen("unix", p.API)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, []net.Listener{ln}, time.Second) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()

	const img = `registry.example/a"b\c:1` + "\n" + `é`
	spec := &sandbox.Spec{Args: []string{"true"}, Image: img, Profile: "moderate", Mode: "claude", Rootfs: image.Rootfs{Host: true}}
	if err := srv.Prewarm(spec, 3); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, err := srv.RunLocal(ctx, spec, sandbox.Stdio{}, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1100 * time.Millisecond) // an uptime of at least a second
	var st daemonStatus
	deadline := time.Now().Add(10 * time.Second)
	for {
		st = daemonStatus{Pools: []poolStatus{}, PoolRuns: map[string]int64{}}
		readDaemonStatus(p, &st)
		if len(st.Pools) == 1 && st.Pools[0].Ready == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A pool is per spec, agent mode included: status names it.
	if len(st.Pools) != 1 || st.Pools[0] != (poolStatus{Backend: "native", Image: img, Profile: "moderate", Mode: "claude", Ready: 3}) {
		t.Errorf("pools: %+v", st.Pools)
	}
	if st.PoolRuns["hit"]+st.PoolRuns["miss"] != 2 || len(st.PoolRuns) != 3 {
		t.Errorf("pool runs: %v", st.PoolRuns)
	}
	if st.Uptime < 1 {
		t.Errorf("uptime %d s", st.Uptime)
	}

	// No server: nothing is filled in, and the error says so.
	none := daemonStatus{Pools: []poolStatus{}, PoolRuns: map[string]int64{}}
	if err := readDaemonStatus(daemon.PathsFor(filepath.Join(t.TempDir(), "none")), &none); err == nil {
		t.Error("no error without a server")
	}
	if len(none.Pools) != 0 || len(none.PoolRuns) != 0 || none.Uptime != 0 {
		t.Errorf("without a server: %+v", none)
	}
}

// TestDaemonStatusUptime: 'daemon status' says how long the daemon
// process has run, also when its GET /status carries no uptime (a
// daemon of an older version) or does not answer, and then says that
// the pools and runs are unknown rather than none.
func TestDaemonStatusUptime(t *testing.T) {
	dd := t.TempDir()
	p := daemon.PathsFor(dd)
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// The daemon's process: its command line names it as one, as
	// daemon.Paths.PID checks.
	proc := exec.Command("sh", "-c", "sleep 60; true", "--daemon", "serve", dd)
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Process.Kill(); proc.Wait() })
	started := time.Now()
	if err := os.WriteFile(p.PIDFile, []byte(strconv.Itoa(proc.Process.Pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", p.API)
	if err != nil {
		t.Fatal(err)
	}
	var statusBody atomic.Value
	statusBody.Store(`{"data": {"version": "0.9", "backend": "native", "api_key_configured": false}}`)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"data": {"status": "ok"}}`) })
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		b := statusBody.Load().(string)
		if b == "" {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, b)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	time.Sleep(2100*time.Millisecond - time.Since(started))

	status := func() (string, daemonStatus) {
		t.Helper()
		out, errb, err := runImagesCLI(t, dd, "daemon", "status")
		if err != nil {
			t.Fatalf("daemon status: %v %s", err, errb)
		}
		jout, errb, err := runImagesCLI(t, dd, "daemon", "status", "--json")
		if err != nil {
			t.Fatalf("daemon status --json: %v %s", err, errb)
		}
		var st daemonStatus
		if err := json.Unmarshal([]byte(jout), &st); err != nil {
			t.Fatalf("%v: %s", err, jout)
		}
		return out, st
	}
	upper := int64(time.Since(started)/time.Second) + 5
	out, st := status()
	up := int64(-1)
	if m := regexp.MustCompile(`running \(pid \d+, up (\d+)s\)`).FindStringSubmatch(out); m != nil {
		up, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if up < 2 || up > upper {
		t.Errorf("an older daemon's status:\n%s", out)
	}
	if !st.Running || st.Uptime < 2 || st.Uptime > upper || st.StatusError != "" {
		t.Errorf("an older daemon's status --json: %+v", st)
	}
	if !strings.Contains(out, "runs served: 0") || !strings.Contains(out, "warm pools: none yet") {
		t.Errorf("an older daemon's status:\n%s", out)
	}

	// GET /status fails: the uptime still, and the pools unknown.
	statusBody.Store("")
	out, st = status()
	if !regexp.MustCompile(`running \(pid \d+, up [2-9]s\)`).MatchString(out) || !strings.Contains(out, "warm pools: unknown (GET /status: 503") ||
		strings.Contains(out, "none yet") {
		t.Errorf("a daemon whose /status fails:\n%s", out)
	}
	if st.Uptime < 2 || !strings.Contains(st.StatusError, "503") {
		t.Errorf("a daemon whose /status fails, --json: %+v", st)
	}
}

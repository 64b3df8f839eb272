package cli

import (
	"context"
	"net"
	"os"
	"path/filepath"
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
	spec := &sandbox.Spec{Args: []string{"true"}, Image: img, Profile: "moderate", Rootfs: image.Rootfs{Host: true}}
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
	if len(st.Pools) != 1 || st.Pools[0] != (poolStatus{Image: img, Profile: "moderate", Ready: 3}) {
		t.Errorf("pools: %+v", st.Pools)
	}
	if st.PoolRuns["hit"]+st.PoolRuns["miss"] != 2 || len(st.PoolRuns) != 3 {
		t.Errorf("pool runs: %v", st.PoolRuns)
	}
	if st.Uptime < 1 {
		t.Errorf("uptime %d s", st.Uptime)
	}

	// No server: nothing is filled in.
	none := daemonStatus{Pools: []poolStatus{}, PoolRuns: map[string]int64{}}
	readDaemonStatus(daemon.PathsFor(filepath.Join(t.TempDir(), "none")), &none)
	if len(none.Pools) != 0 || len(none.PoolRuns) != 0 || none.Uptime != 0 {
		t.Errorf("without a server: %+v", none)
	}
}

//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// poolBenchEnv, set to a number N, makes TestDaemonRunBackendPool also
// time N cold runs (--no-daemon) and N runs from the daemon's pool of
// each backend, alternating, and log their medians (bench/README.md).
const poolBenchEnv = "AGENTKERNEL_E2E_POOL_BENCH"

// daemonPoolState is what 'daemon status --json' says of the pools: the
// runs served per kind (hit, miss, ...) and the ready sandboxes per
// backend.
type daemonPoolState struct {
	runs  map[string]int
	ready map[string]int
}

func (a *ak) daemonPools() daemonPoolState {
	a.t.Helper()
	r := a.run("daemon", "status", "--json")
	var st struct {
		PoolRuns map[string]int `json:"pool_runs"`
		Pools    []struct {
			Backend string `json:"backend"`
			Ready   int    `json:"ready"`
		} `json:"pools"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		a.t.Fatalf("daemon status --json: %v %v", r, err)
	}
	s := daemonPoolState{runs: st.PoolRuns, ready: map[string]int{}}
	if s.runs == nil {
		s.runs = map[string]int{}
	}
	for _, p := range st.Pools {
		s.ready[p.Backend] += p.Ready
	}
	return s
}

// waitPoolReady waits until the daemon's pools of backend hold a ready
// sandbox.
func (a *ak) waitPoolReady(backend string) {
	a.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for a.daemonPools().ready[backend] == 0 {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(a.dataDir, "daemon", "daemon.log"))
			a.t.Fatalf("the %s pool did not fill: %v\ndaemon log:\n%s", backend, a.run("daemon", "status"), log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDaemonRunBackendPool: with a daemon running, 'agentkernel run -B
// gvisor' (and -B docker and -B podman, on a private dockerd and a
// private 'podman system service') takes a sandbox from the pool
// 'daemon prewarm -B' filled, which the daemon's counters show, and
// behaves exactly as the same run without the daemon: exit status,
// stdout, stderr, stdin, a signal's status, the timeout's 124 and its
// message, a clean sandbox each time. A run whose spec has no warm
// sandbox is run here, cold, with the same answers; with the daemon
// stopped nothing changes either.
func TestDaemonRunBackendPool(t *testing.T) {
	t.Run("gvisor", func(t *testing.T) {
		a, ref := withGVisor(t)
		checkDaemonRunPool(t, a, ref, "gvisor")
	})
	for _, e := range engines() {
		t.Run(e.name, func(t *testing.T) {
			a, ref := withEngine(t, e, startEngine(t, e))
			checkDaemonRunPool(t, a, ref, e.name)
		})
	}
}

func checkDaemonRunPool(t *testing.T, a *ak, ref, backend string) {
	if r := a.run("daemon", "start"); r.code != 0 {
		t.Fatalf("daemon start: %v", r)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			a.run("daemon", "stop")
		}
	}
	t.Cleanup(stop)
	flags := []string{"-B", backend, "--image", ref, "-p", "restrictive"}
	if r := a.run(append([]string{"daemon", "prewarm"}, flags...)...); r.code != 0 || !strings.Contains(r.stderr, "1 ready") {
		log, _ := os.ReadFile(filepath.Join(a.dataDir, "daemon", "daemon.log"))
		t.Fatalf("prewarm: %v\ndaemon log:\n%s", r, log)
	}
	run := func(noDaemon bool, stdin string, more []string, cmd ...string) result {
		t.Helper()
		args := append([]string{"run"}, flags...)
		if noDaemon {
			args = append(args, "--no-daemon")
		}
		args = append(append(append(args, more...), "--"), cmd...)
		a.stdin = stdin
		defer func() { a.stdin = "" }()
		return a.run(args...)
	}
	cases := []struct {
		name  string
		stdin string
		more  []string
		cmd   []string
		code  int
	}{
		{"status and streams", "", nil, []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, 3},
		{"stdin", "from the caller\n", nil, []string{"sh", "-c", "cat; echo done"}, 0},
		{"clean sandbox", "", nil, []string{"sh", "-c", "ls /tmp/left 2>&1; echo x > /tmp/left; id -u"}, 0},
		{"signal", "", nil, []string{"sh", "-c", "echo before; kill -TERM $$"}, 143},
		{"timeout", "", []string{"--timeout", "2s"}, []string{"sh", "-c", "echo started; sleep 30"}, 124},
		{"missing command", "", nil, []string{"/no/such/command"}, 127},
	}
	for _, c := range cases {
		if len(c.more) > 0 {
			// Another spec (the timeout is part of it): its own pool.
			if r := a.run(append(append([]string{"daemon", "prewarm"}, flags...), c.more...)...); r.code != 0 {
				t.Fatalf("%s: prewarm: %v", c.name, r)
			}
		}
		cold := run(true, c.stdin, c.more, c.cmd...)
		if cold.code != c.code && !(c.name == "signal" && backend != "gvisor") {
			t.Errorf("%s: cold run: %v, want exit %d", c.name, cold, c.code)
		}
		a.waitPoolReady(backend)
		before := a.daemonPools().runs["hit"]
		pooled := run(false, c.stdin, c.more, c.cmd...)
		if hits := a.daemonPools().runs["hit"]; hits != before+1 {
			t.Errorf("%s: the run did not take the warm sandbox (hits %d → %d): %v", c.name, before, hits, pooled)
		}
		switch {
		case c.name == "signal" && backend != "gvisor":
			// A cold engine run's command is its container's PID 1,
			// which a signal without a handler does not end (exit 0);
			// a pooled one runs beside the idle PID 1, as on native
			// and gvisor (143). The one known difference.
			if cold.code != 0 || pooled.code != 143 || pooled.stdout != cold.stdout {
				t.Errorf("%s: pooled %v\ncold %v", c.name, pooled, cold)
			}
		case c.code == 127:
			// The engine's words differ; the status and what it says do not.
			if pooled.code != cold.code || pooled.stdout != cold.stdout || !strings.Contains(pooled.stderr, "command not found") {
				t.Errorf("%s: from the pool and cold differ:\npooled %v\ncold   %v", c.name, pooled, cold)
			}
		case pooled.code != cold.code || pooled.stdout != cold.stdout || pooled.stderr != cold.stderr:
			t.Errorf("%s: from the pool and cold differ:\npooled %v\ncold   %v", c.name, pooled, cold)
		}
	}
	// A spec no pool holds (another environment): the daemon counts a
	// miss and the run goes on here, cold, with the same answers; the
	// miss started that spec's pool, which the next such run takes.
	a.waitPoolReady(backend)
	before := a.daemonPools()
	cold := run(true, "", []string{"-e", "FOO=bar"}, "sh", "-c", "echo $FOO; exit 5")
	r := run(false, "", []string{"-e", "FOO=bar"}, "sh", "-c", "echo $FOO; exit 5")
	after := a.daemonPools()
	if r.code != 5 || r.stdout != "bar\n" || r.stdout != cold.stdout || r.stderr != cold.stderr || cold.code != 5 {
		t.Errorf("a run without a warm sandbox: %v\ncold: %v", r, cold)
	}
	if after.runs["miss"] != before.runs["miss"]+1 || after.runs["hit"] != before.runs["hit"] {
		t.Errorf("a run without a warm sandbox: runs %v → %v", before.runs, after.runs)
	}
	if n := os.Getenv(poolBenchEnv); n != "" {
		benchDaemonRunPool(t, a, backend, n, func(noDaemon bool) result { return run(noDaemon, "", nil, "/bin/true") })
	}
	stop()
	r = run(false, "", nil, "sh", "-c", "echo no daemon; exit 4")
	if r.code != 4 || r.stdout != "no daemon\n" {
		t.Errorf("with the daemon stopped: %v", r)
	}
}

// benchDaemonRunPool times n cold runs and n runs from the pool,
// alternating (each pooled one after its pool has refilled, untimed),
// and logs their medians.
func benchDaemonRunPool(t *testing.T, a *ak, backend, nText string, run func(noDaemon bool) result) {
	n, err := strconv.Atoi(nText)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a number of runs", poolBenchEnv, nText)
	}
	var cold, pooled []float64
	for i := 0; i < n; i++ {
		r := run(true)
		if r.code != 0 {
			t.Fatalf("cold run: %v", r)
		}
		cold = append(cold, float64(r.took)/float64(time.Millisecond))
		a.waitPoolReady(backend)
		time.Sleep(500 * time.Millisecond) // the refill's teardown settles
		before := a.daemonPools().runs["hit"]
		r = run(false)
		if r.code != 0 || a.daemonPools().runs["hit"] != before+1 {
			t.Fatalf("pooled run %d not served from the pool: %v", i, r)
		}
		pooled = append(pooled, float64(r.took)/float64(time.Millisecond))
		time.Sleep(500 * time.Millisecond)
	}
	mc, mp := median(cold), median(pooled)
	t.Logf("%s, /bin/true, %d runs each, alternating: cold (--no-daemon) median %.0f ms (min %.0f), from the daemon's pool median %.0f ms (min %.0f), %.2f× the cold run",
		backend, n, mc, minOf(cold), mp, minOf(pooled), mp/mc)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func minOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/pkg/client"
)

// envInt is an integer from the environment, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// goroutines reads the server's agentkernel_goroutines gauge.
func goroutines(t *testing.T, s *apiServer) int {
	t.Helper()
	r := s.raw("GET", "/metrics", "")
	sc := bufio.NewScanner(strings.NewReader(string(r.body)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "agentkernel_goroutines "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatalf("no agentkernel_goroutines in /metrics")
	return 0
}

// TestAPILoad: a bounded loopback load of mixed requests (/run, exec,
// list, get) with no errors, and nothing leaked afterwards: sandboxes,
// mounts under the data dir, server goroutines. AK_API_LOAD_N and
// AK_API_LOAD_C scale it (the full run: 10000 at 64).
func TestAPILoad(t *testing.T) {
	n, conc := envInt("AK_API_LOAD_N", 2000), envInt("AK_API_LOAD_C", 16)
	s := startAPI(t, "--api-key", apiKey)
	tr := &http.Transport{MaxIdleConnsPerHost: conc}
	c := client.New(client.WithBaseURL(s.url), client.WithAPIKey(apiKey), client.WithHTTPClient(&http.Client{Transport: tr}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const name = "api-load"
	if _, err := c.CreateSandbox(ctx, client.CreateOptions{Name: name, Image: "host"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.a.run("sandbox", "rm", "--force", name) })
	before := goroutines(t, s)

	var next, errs atomic.Int64
	var mu sync.Mutex
	lat := map[string][]time.Duration{}
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t0 := time.Now()
				var kind string
				var err error
				switch i % 4 {
				case 0:
					kind = "run"
					var out string
					out, err = c.Run(ctx, []string{"echo", strconv.FormatInt(i, 10)}, &client.RunOptions{Image: "host"})
					if err == nil && out != fmt.Sprintf("%d\n", i) {
						err = fmt.Errorf("run output %q", out)
					}
				case 1:
					kind = "exec"
					var out string
					out, err = c.Exec(ctx, name, []string{"echo", "x"}, nil)
					if err == nil && out != "x\n" {
						err = fmt.Errorf("exec output %q", out)
					}
				case 2:
					kind = "list"
					_, err = c.ListSandboxes(ctx, nil)
				default:
					kind = "get"
					_, err = c.GetSandbox(ctx, name)
				}
				d := time.Since(t0)
				if err != nil {
					if errs.Add(1) <= 5 {
						t.Errorf("%s #%d: %v", kind, i, err)
					}
					continue
				}
				mu.Lock()
				lat[kind] = append(lat[kind], d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if e := errs.Load(); e > 0 {
		t.Errorf("%d of %d requests failed", e, n)
	}
	t.Logf("%d requests at concurrency %d in %v: %.0f req/s", n, conc, took.Round(time.Millisecond), float64(n)/took.Seconds())
	for _, k := range []string{"run", "exec", "list", "get"} {
		l := lat[k]
		slices.Sort(l)
		if len(l) > 0 {
			t.Logf("%-4s n=%d p50=%v p99=%v", k, len(l), l[len(l)/2].Round(10*time.Microsecond), l[len(l)*99/100].Round(10*time.Microsecond))
		}
	}

	// Nothing leaked.
	if err := c.RemoveSandbox(ctx, name); err != nil {
		t.Fatal(err)
	}
	if l, err := c.ListSandboxes(ctx, nil); err != nil || len(l) != 0 {
		t.Errorf("sandboxes left: %v %v", l, err)
	}
	tr.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for {
		// Each warm (prepared) sandbox has three goroutines waiting on
		// it: its reaper, its error pipe and its status reader.
		warm := metricSum(t, s, "agentkernel_pool_warm_sandboxes{")
		after := goroutines(t, s)
		if after <= before+2+3*warm {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("server goroutines: %d before, %d after, with %d warm sandboxes", before, after, warm)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The warm pool's sandboxes live until the server stops, which
	// removes them all.
	s.stop()
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), s.a.dataDir) {
		t.Errorf("mounts left under the data dir:\n%s", mi)
	}
	if ents, _ := os.ReadDir(s.a.dataDir + "/sandboxes"); len(ents) != 0 {
		t.Errorf("sandbox directories left: %v", ents)
	}
}

// BenchmarkAPIRun is POST /run of `true` with fast:false (image host, a
// fresh ephemeral sandbox each time) through pkg/client on loopback.
func BenchmarkAPIRun(b *testing.B) { benchRun(b, false) }

// BenchmarkAPIRunFast is the same with fast:true (the default): a sandbox
// from the warm pool each time. It reports p50/p99 latency and req/s at
// concurrency AK_BENCH_C (default 8).
func BenchmarkAPIRunFast(b *testing.B) { benchRun(b, true) }

func benchRun(b *testing.B, fast bool) {
	conc := envInt("AK_BENCH_C", 8)
	s := startAPI(b, "--api-key", apiKey)
	tr := &http.Transport{MaxIdleConnsPerHost: conc}
	c := client.New(client.WithBaseURL(s.url), client.WithAPIKey(apiKey), client.WithHTTPClient(&http.Client{Transport: tr}))
	ctx := context.Background()
	f := fast
	opts := &client.RunOptions{Image: "host", Fast: &f}
	// Warm up (creates the pool of the key).
	for range conc {
		if _, err := c.Run(ctx, []string{"true"}, opts); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	var mu sync.Mutex
	var lat []time.Duration
	start := time.Now()
	if rate := envInt("AK_BENCH_RATE", 0); rate > 0 {
		// Open loop: b.N requests at a fixed rate, each on its own,
		// whatever the latency of the others (the load a pool is sized
		// for, rather than as many requests as the machine can take).
		b.ResetTimer()
		start = time.Now()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		var wg sync.WaitGroup
		for range b.N {
			<-tick.C
			wg.Go(func() {
				t0 := time.Now()
				if _, err := c.Run(ctx, []string{"true"}, opts); err != nil {
					b.Error(err)
					return
				}
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	b.SetParallelism((conc + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		if len(lat) > 0 {
			for pb.Next() {
			}
			return
		}
		var mine []time.Duration
		for pb.Next() {
			t0 := time.Now()
			if _, err := c.Run(ctx, []string{"true"}, opts); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	took := time.Since(start)
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(len(lat))/took.Seconds(), "req/s")
	}
	if fast {
		hit := metricSum(b, s, `agentkernel_pool_runs_total{result="hit"}`)
		miss := metricSum(b, s, `agentkernel_pool_runs_total{result="miss"}`)
		if hit+miss > 0 {
			b.ReportMetric(100*float64(hit)/float64(hit+miss), "hit-%")
		}
	}
}

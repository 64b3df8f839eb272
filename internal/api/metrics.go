package api

import (
	"bytes"
	"fmt"
	"net/http"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// runBuckets are the upper bounds (seconds) of the run latency histogram.
var runBuckets = [...]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

type reqKey struct {
	route string
	code  int
}

// metrics are the server's counters, written in the Prometheus text
// format by serveMetrics.
type metrics struct {
	mu       sync.Mutex
	requests map[reqKey]uint64
	reqSum   map[string]float64
	runCount uint64
	runSum   float64
	runHist  [len(runBuckets)]uint64
	// poolRuns counts fast runs by how they were served: "hit" (a warm
	// sandbox), "miss" (pool empty: ephemeral), "unpoolable" (ephemeral).
	poolRuns map[string]uint64
}

func newMetrics() *metrics {
	return &metrics{requests: map[reqKey]uint64{}, reqSum: map[string]float64{},
		poolRuns: map[string]uint64{"hit": 0, "miss": 0, "unpoolable": 0}}
}

func (m *metrics) request(route string, code int, d time.Duration) {
	m.mu.Lock()
	m.requests[reqKey{route, code}]++
	m.reqSum[route] += d.Seconds()
	m.mu.Unlock()
}

func (m *metrics) run(d time.Duration) {
	sec := d.Seconds()
	m.mu.Lock()
	m.runCount++
	m.runSum += sec
	for i, b := range runBuckets {
		if sec <= b {
			m.runHist[i]++
		}
	}
	m.mu.Unlock()
}

func (m *metrics) poolRun(result string) {
	m.mu.Lock()
	m.poolRuns[result]++
	m.mu.Unlock()
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// serveMetrics is GET /metrics in the Prometheus text format (0.0.4).
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request, _ []string) {
	var b bytes.Buffer
	m := s.metrics
	m.mu.Lock()
	keys := make([]reqKey, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].route != keys[j].route {
			return keys[i].route < keys[j].route
		}
		return keys[i].code < keys[j].code
	})
	b.WriteString("# HELP agentkernel_http_requests_total HTTP requests answered, by route and status code.\n# TYPE agentkernel_http_requests_total counter\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "agentkernel_http_requests_total{route=%q,code=\"%d\"} %d\n", k.route, k.code, m.requests[k])
	}
	routes := make([]string, 0, len(m.reqSum))
	for r := range m.reqSum {
		routes = append(routes, r)
	}
	sort.Strings(routes)
	b.WriteString("# HELP agentkernel_http_request_duration_seconds_total Time spent answering requests, by route.\n# TYPE agentkernel_http_request_duration_seconds_total counter\n")
	for _, r := range routes {
		fmt.Fprintf(&b, "agentkernel_http_request_duration_seconds_total{route=%q} %s\n", r, fmtFloat(m.reqSum[r]))
	}
	b.WriteString("# HELP agentkernel_run_duration_seconds Time to run one command in a fresh sandbox (/run, /run/stream, /batch/run).\n# TYPE agentkernel_run_duration_seconds histogram\n")
	for i, le := range runBuckets {
		fmt.Fprintf(&b, "agentkernel_run_duration_seconds_bucket{le=%q} %d\n", fmtFloat(le), m.runHist[i])
	}
	fmt.Fprintf(&b, "agentkernel_run_duration_seconds_bucket{le=\"+Inf\"} %d\n", m.runCount)
	fmt.Fprintf(&b, "agentkernel_run_duration_seconds_sum %s\nagentkernel_run_duration_seconds_count %d\n", fmtFloat(m.runSum), m.runCount)
	b.WriteString("# HELP agentkernel_pool_runs_total Fast runs, by how they were served: hit (warm sandbox), miss (pool empty: ephemeral), unpoolable (ephemeral).\n# TYPE agentkernel_pool_runs_total counter\n")
	for _, k := range []string{"hit", "miss", "unpoolable"} {
		fmt.Fprintf(&b, "agentkernel_pool_runs_total{result=%q} %d\n", k, m.poolRuns[k])
	}
	m.mu.Unlock()

	b.WriteString("# HELP agentkernel_sandboxes Persistent sandboxes, by status.\n# TYPE agentkernel_sandboxes gauge\n")
	counts := map[string]int{sandbox.StatusRunning: 0, sandbox.StatusStopped: 0}
	if list, err := s.opts.Manager.List(r.Context(), sandbox.ListOptions{}); err == nil {
		for _, sb := range list {
			st := sb.Status
			if st != sandbox.StatusRunning {
				st = sandbox.StatusStopped
			}
			counts[st]++
		}
	}
	fmt.Fprintf(&b, "agentkernel_sandboxes{status=\"running\"} %d\nagentkernel_sandboxes{status=\"stopped\"} %d\n", counts["running"], counts["stopped"])
	b.WriteString("# HELP agentkernel_pool_warm_sandboxes Warm sandboxes ready in the pools, by image and profile.\n# TYPE agentkernel_pool_warm_sandboxes gauge\n")
	for _, ps := range s.pools.sizes() {
		fmt.Fprintf(&b, "agentkernel_pool_warm_sandboxes{image=%q,profile=%q} %d\n", ps.image, ps.profile, ps.ready)
	}
	fmt.Fprintf(&b, "# HELP agentkernel_goroutines Goroutines of the server process.\n# TYPE agentkernel_goroutines gauge\nagentkernel_goroutines %d\n", runtime.NumGoroutine())
	fmt.Fprintf(&b, "# HELP agentkernel_uptime_seconds Seconds since the server started.\n# TYPE agentkernel_uptime_seconds gauge\nagentkernel_uptime_seconds %s\n", fmtFloat(time.Since(s.started).Seconds()))

	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

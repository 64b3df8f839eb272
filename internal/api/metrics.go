package api

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// GET /metrics is written by prometheus/client_golang (exposition
// format, label escaping, content negotiation). Each Server has its own
// registry, never the process-wide default one: two servers in one
// process (tests) count apart, and nothing another package registers
// shows here.

// runBuckets are the upper bounds (seconds) of the run latency histogram.
var runBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// poolResults are how a fast run can be served: "hit" (a warm sandbox),
// "miss" (pool empty: ephemeral), "unpoolable" (ephemeral).
var poolResults = []string{"hit", "miss", "unpoolable"}

// metrics are the server's counters, kept as requests and runs happen.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	reqTime  *prometheus.CounterVec
	runs     prometheus.Histogram
	poolRuns *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentkernel_http_requests_total",
			Help: "HTTP requests answered, by route and status code.",
		}, []string{"route", "code"}),
		reqTime: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentkernel_http_request_duration_seconds_total",
			Help: "Time spent answering requests, by route.",
		}, []string{"route"}),
		runs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "agentkernel_run_duration_seconds",
			Help:    "Time to run one command in a fresh sandbox (/run, /run/stream, /batch/run).",
			Buckets: runBuckets,
		}),
		poolRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentkernel_pool_runs_total",
			Help: "Fast runs, by how they were served: hit (warm sandbox), miss (pool empty: ephemeral), unpoolable (ephemeral).",
		}, []string{"result"}),
	}
	for _, r := range poolResults {
		m.poolRuns.WithLabelValues(r) // every result shows, at 0 until it happens
	}
	m.reg.MustRegister(m.requests, m.reqTime, m.runs, m.poolRuns)
	return m
}

func (m *metrics) request(route string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.reqTime.WithLabelValues(route).Add(d.Seconds())
}

func (m *metrics) run(d time.Duration) { m.runs.Observe(d.Seconds()) }

func (m *metrics) poolRun(result string) { m.poolRuns.WithLabelValues(result).Inc() }

// serveMetrics is GET /metrics: the counters, and the server's state
// read at scrape time within the request's context.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	state := prometheus.NewRegistry()
	state.MustRegister(stateCollector{s: s, ctx: r.Context()})
	promhttp.HandlerFor(prometheus.Gatherers{s.metrics.reg, state}, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	}).ServeHTTP(w, r)
}

var (
	sandboxesDesc = prometheus.NewDesc("agentkernel_sandboxes",
		"Persistent sandboxes, by status.", []string{"status"}, nil)
	warmDesc = prometheus.NewDesc("agentkernel_pool_warm_sandboxes",
		"Warm sandboxes ready in the pools, by image and profile.", []string{"image", "profile"}, nil)
	goroutinesDesc = prometheus.NewDesc("agentkernel_goroutines",
		"Goroutines of the server process.", nil, nil)
	uptimeDesc = prometheus.NewDesc("agentkernel_uptime_seconds",
		"Seconds since the server started.", nil, nil)
)

// stateCollector reports what the server holds at the moment of one
// scrape: persistent sandboxes (from the Manager), warm pools, the
// process's goroutines and the server's uptime.
type stateCollector struct {
	s   *Server
	ctx context.Context
}

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sandboxesDesc
	ch <- warmDesc
	ch <- goroutinesDesc
	ch <- uptimeDesc
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{sandbox.StatusRunning: 0, sandbox.StatusStopped: 0}
	if list, err := c.s.opts.Manager.List(c.ctx, sandbox.ListOptions{}); err == nil {
		for _, sb := range list {
			st := sb.Status
			if st != sandbox.StatusRunning {
				st = sandbox.StatusStopped
			}
			counts[st]++
		}
	}
	for _, st := range []string{sandbox.StatusRunning, sandbox.StatusStopped} {
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(counts[st]), st)
	}
	for _, ps := range c.s.pools.sizes() {
		// A label value must be UTF-8 (else the metric is refused).
		ch <- prometheus.MustNewConstMetric(warmDesc, prometheus.GaugeValue, float64(ps.ready),
			strings.ToValidUTF8(ps.image, "\uFFFD"), strings.ToValidUTF8(ps.profile, "\uFFFD"))
	}
	ch <- prometheus.MustNewConstMetric(goroutinesDesc, prometheus.GaugeValue, float64(runtime.NumGoroutine()))
	ch <- prometheus.MustNewConstMetric(uptimeDesc, prometheus.GaugeValue, time.Since(c.s.started).Seconds())
}

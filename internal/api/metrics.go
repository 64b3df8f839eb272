package api

import (
	"bytes"
	"fmt"
	"net/http"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// GET /metrics is written here in the Prometheus text format (0.0.4)
// rather than by prometheus/client_golang: a handful of counters and
// gauges do not need its registries, and linking it (with protobuf and
// procfs) adds package initialisation and memory to every agentkernel-full
// process, each persistent sandbox's supervisor included. TestMetricsParse
// holds the output to what Prometheus's own parser (prometheus/common's
// expfmt, a test-only dependency) reads, label escaping included.

// runBuckets are the upper bounds (seconds) of the run latency histogram.
var runBuckets = [...]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// poolResults are how a fast run can be served: "hit" (a warm sandbox),
// "miss" (pool empty: ephemeral), "unpoolable" (ephemeral).
var poolResults = [...]string{"hit", "miss", "unpoolable"}

type reqKey struct {
	route string
	code  int
}

// metrics are the server's counters, kept as requests and runs happen.
type metrics struct {
	mu       sync.Mutex
	requests map[reqKey]uint64
	reqSum   map[string]float64
	runCount uint64
	runSum   float64
	runHist  [len(runBuckets)]uint64
	poolRuns map[string]uint64
	// netDenied counts what runs' network policies refused, by kind.
	netDenied map[string]uint64
	// secretInjected counts the requests runs' secrets were added to, by
	// secret name and host; secretRefused the requests the injector
	// refused for carrying a placeholder, by host. Names only.
	secretInjected map[secretSeries]uint64
	secretRefused  map[string]uint64
}

// secretSeries is one secret (by name) for one host.
type secretSeries struct{ key, host string }

// maxSecretSeries bounds the series of the secret counters; what comes
// beyond is counted under the name and host "*", which no secret or host
// can have.
const maxSecretSeries = 512

// netKinds are the kinds of network refusal (sandbox.NetworkDenial.Kind).
var netKinds = []string{"dns", "tcp", "udp", "sni", "host"}

func newMetrics() *metrics {
	m := &metrics{requests: map[reqKey]uint64{}, reqSum: map[string]float64{}, poolRuns: map[string]uint64{}, netDenied: map[string]uint64{},
		secretInjected: map[secretSeries]uint64{}, secretRefused: map[string]uint64{}}
	for _, r := range poolResults {
		m.poolRuns[r] = 0 // every result shows, at 0 until it happens
	}
	for _, k := range netKinds {
		m.netDenied[k] = 0
	}
	return m
}

// networkDenials counts a run's refused connections and names.
func (m *metrics) networkDenials(ds []sandbox.NetworkDenial) {
	if len(ds) == 0 {
		return
	}
	m.mu.Lock()
	for _, d := range ds {
		if _, ok := m.netDenied[d.Kind]; ok {
			m.netDenied[d.Kind] += uint64(max(d.Count, 1))
		}
	}
	m.mu.Unlock()
}

// secrets counts a run's secret injections (Result.SecretInjections, the
// network helper's report, audited as secret_injected) and the requests
// its injector refused (network denials of kind "secret").
func (m *metrics) secrets(res sandbox.Result) {
	if len(res.SecretInjections) == 0 && len(res.NetworkDenials) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, i := range res.SecretInjections {
		k := secretSeries{i.Key, strings.ToLower(i.Host)}
		if _, ok := m.secretInjected[k]; !ok && len(m.secretInjected) >= maxSecretSeries {
			k = secretSeries{"*", "*"}
		}
		m.secretInjected[k] += uint64(max(i.Count, 1))
	}
	for _, d := range res.NetworkDenials {
		if d.Kind != secretDenial {
			continue
		}
		h := strings.ToLower(d.Name)
		if _, ok := m.secretRefused[h]; !ok && len(m.secretRefused) >= maxSecretSeries {
			h = "*"
		}
		m.secretRefused[h] += uint64(max(d.Count, 1))
	}
}

// secretDenial is the kind of a network denial of the secret injector
// (netpolicy.KindSecret).
const secretDenial = "secret"

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

// labelEscaper escapes a label value as the text format wants: only the
// backslash, the double quote and the line feed (Go's %q escapes far
// more, which Prometheus's parser refuses).
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// label is name="value", the value made valid UTF-8 and escaped.
func label(name, value string) string {
	return name + `="` + labelEscaper.Replace(strings.ToValidUTF8(value, "\uFFFD")) + `"`
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// family writes a metric family's HELP and TYPE lines.
func family(b *bytes.Buffer, name, typ, help string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// serveMetrics is GET /metrics: the counters, and the server's state
// read at scrape time within the request's context.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
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
	family(&b, "agentkernel_http_requests_total", "counter", "HTTP requests answered, by route and status code.")
	for _, k := range keys {
		fmt.Fprintf(&b, "agentkernel_http_requests_total{%s,%s} %d\n", label("code", strconv.Itoa(k.code)), label("route", k.route), m.requests[k])
	}
	routes := make([]string, 0, len(m.reqSum))
	for r := range m.reqSum {
		routes = append(routes, r)
	}
	sort.Strings(routes)
	family(&b, "agentkernel_http_request_duration_seconds_total", "counter", "Time spent answering requests, by route.")
	for _, r := range routes {
		fmt.Fprintf(&b, "agentkernel_http_request_duration_seconds_total{%s} %s\n", label("route", r), fmtFloat(m.reqSum[r]))
	}
	family(&b, "agentkernel_run_duration_seconds", "histogram", "Time to run one command in a fresh sandbox (/run, /run/stream, /batch/run).")
	for i, le := range runBuckets {
		fmt.Fprintf(&b, "agentkernel_run_duration_seconds_bucket{%s} %d\n", label("le", fmtFloat(le)), m.runHist[i])
	}
	fmt.Fprintf(&b, "agentkernel_run_duration_seconds_bucket{le=\"+Inf\"} %d\n", m.runCount)
	fmt.Fprintf(&b, "agentkernel_run_duration_seconds_sum %s\nagentkernel_run_duration_seconds_count %d\n", fmtFloat(m.runSum), m.runCount)
	family(&b, "agentkernel_pool_runs_total", "counter", "Fast runs, by how they were served: hit (warm sandbox), miss (pool empty: ephemeral), unpoolable (ephemeral).")
	results := make([]string, 0, len(m.poolRuns))
	for k := range m.poolRuns {
		results = append(results, k)
	}
	sort.Strings(results)
	for _, k := range results {
		fmt.Fprintf(&b, "agentkernel_pool_runs_total{%s} %d\n", label("result", k), m.poolRuns[k])
	}
	family(&b, "agentkernel_network_denied_total", "counter", "Connections and names that runs' network policies refused, by kind: dns (NXDOMAIN), tcp, udp, sni, host.")
	for _, k := range netKinds {
		fmt.Fprintf(&b, "agentkernel_network_denied_total{%s} %d\n", label("kind", k), m.netDenied[k])
	}
	family(&b, "agentkernel_secret_injections_total", "counter", "Requests of runs that a secret was added to, by secret name and host.")
	series := make([]secretSeries, 0, len(m.secretInjected))
	for k := range m.secretInjected {
		series = append(series, k)
	}
	sort.Slice(series, func(i, j int) bool {
		if series[i].key != series[j].key {
			return series[i].key < series[j].key
		}
		return series[i].host < series[j].host
	})
	for _, k := range series {
		fmt.Fprintf(&b, "agentkernel_secret_injections_total{%s,%s} %d\n", label("host", k.host), label("key", k.key), m.secretInjected[k])
	}
	family(&b, "agentkernel_secret_refusals_total", "counter", "Requests of runs that the secret injector refused for carrying a secret placeholder where no secret of it goes, by host.")
	hosts := make([]string, 0, len(m.secretRefused))
	for h := range m.secretRefused {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		fmt.Fprintf(&b, "agentkernel_secret_refusals_total{%s} %d\n", label("host", h), m.secretRefused[h])
	}
	m.mu.Unlock()

	counts := s.sandboxCounts(r)
	family(&b, "agentkernel_sandboxes", "gauge", "Persistent sandboxes, by status.")
	for _, st := range []string{sandbox.StatusRunning, sandbox.StatusStopped} {
		fmt.Fprintf(&b, "agentkernel_sandboxes{%s} %d\n", label("status", st), counts[st])
	}
	family(&b, "agentkernel_pool_warm_sandboxes", "gauge", "Warm sandboxes ready in the pools, by image, profile and agent mode.")
	for _, ps := range s.pools.sizes() {
		fmt.Fprintf(&b, "agentkernel_pool_warm_sandboxes{%s,%s,%s,%s} %d\n", label("backend", ps.backend), label("image", ps.image), label("profile", ps.profile), label("mode", ps.mode), ps.ready)
	}
	family(&b, "agentkernel_goroutines", "gauge", "Goroutines of the server process.")
	fmt.Fprintf(&b, "agentkernel_goroutines %d\n", runtime.NumGoroutine())
	family(&b, "agentkernel_uptime_seconds", "gauge", "Seconds since the server started.")
	fmt.Fprintf(&b, "agentkernel_uptime_seconds %s\n", fmtFloat(time.Since(s.started).Seconds()))

	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// sandboxCounts are the persistent sandboxes by status (running, or
// stopped for anything else).
func (s *Server) sandboxCounts(r *http.Request) map[string]int {
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
	return counts
}

package api

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestMetricsParse scrapes GET /metrics from a real server over loopback
// and parses the answer as Prometheus does (expfmt's text parser): the
// body must parse, and each series must hold what the server did. The
// warm pool's image and profile labels are the client's strings: here
// they carry a quote, a backslash, a newline, a tab and non-ASCII text,
// which the exposition format escapes (\" \\ \n) or passes as UTF-8.
func TestMetricsParse(t *testing.T) {
	b := &standIn{}
	s := New(Options{
		Manager:        sandbox.NewManager(sandbox.ManagerOptions{Backends: []sandbox.Backend{b}, Default: "standin"}),
		InsecureNoAuth: true,
		Pool:           PoolOptions{MinWarm: 1, MaxWarm: 2},
	})
	ts := httptest.NewServer(s)
	defer ts.Close()
	defer s.pools.close()

	const img, profile = "evil\"}\\n\nimage é中\t\u200b", "pro\\\"file"
	spec := &sandbox.Spec{Args: []string{"true"}, Image: img, Profile: profile, Rootfs: image.Rootfs{Host: true}}
	if err := s.Prewarm(spec, 2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two warm sandboxes", func() bool { return readyIn(s.pools) == 2 })
	// One run served from the pool (a hit), one of a spec the pool cannot
	// take (unpoolable, not run).
	if _, served, err := s.RunLocal(context.Background(), spec, sandbox.Stdio{}, nil, nil); err != nil || served != "hit" {
		t.Fatalf("RunLocal: %q %v", served, err)
	}
	if _, _, err := s.RunLocal(context.Background(), &sandbox.Spec{Rootfs: image.Rootfs{Host: true}}, sandbox.Stdio{}, nil, nil); err == nil {
		t.Fatal("a spec without a command ran")
	}
	waitFor(t, "the pool's refill", func() bool { return readyIn(s.pools) == 2 })
	for range 3 {
		scrape(t, ts.URL+"/health")
	}
	scrape(t, ts.URL+"/no/such/route")

	body := scrape(t, ts.URL+"/metrics")
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	// Escaped as the format says: only \\, \" and \n; a tab, an
	// unprintable rune and non-ASCII text are written as they are (Go's
	// %q writes \t and \u200b, escapes the parser refuses).
	if want := "image=\"evil\\\"}\\\\n\\nimage é中\t\u200b\",profile=\"pro\\\\\\\"file\""; !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s:\n%s", want, body)
	}
	type series struct {
		family string
		labels map[string]string
		want   float64
	}
	for _, c := range []series{
		{"agentkernel_http_requests_total", map[string]string{"route": "GET /health", "code": "200"}, 3},
		{"agentkernel_http_requests_total", map[string]string{"route": "not_found", "code": "404"}, 1},
		{"agentkernel_pool_warm_sandboxes", map[string]string{"backend": "native", "image": img, "profile": profile, "mode": ""}, 2},
		{"agentkernel_pool_runs_total", map[string]string{"result": "hit"}, 1},
		{"agentkernel_pool_runs_total", map[string]string{"result": "miss"}, 0},
		{"agentkernel_pool_runs_total", map[string]string{"result": "unpoolable"}, 0},
		{"agentkernel_network_denied_total", map[string]string{"kind": "dns"}, 2},
		{"agentkernel_network_denied_total", map[string]string{"kind": "tcp"}, 0},
		{"agentkernel_sandboxes", map[string]string{"status": "running"}, 0},
		{"agentkernel_sandboxes", map[string]string{"status": "stopped"}, 0},
	} {
		m := find(fams[c.family], c.labels)
		if m == nil {
			t.Errorf("%s%v: no such series in\n%v", c.family, c.labels, fams[c.family])
			continue
		}
		if got := value(m); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.family, c.labels, got, c.want)
		}
	}
	// Two runs went through RunLocal; the histogram counts both (the
	// refused one too: it took time to refuse).
	if h := fams["agentkernel_run_duration_seconds"]; h == nil || h.GetType() != dto.MetricType_HISTOGRAM ||
		h.Metric[0].GetHistogram().GetSampleCount() != 2 || len(h.Metric[0].GetHistogram().GetBucket()) != len(runBuckets)+1 {
		t.Errorf("run histogram: %v", h)
	}
	if g := fams["agentkernel_goroutines"]; g == nil || value(g.Metric[0]) < 1 {
		t.Errorf("goroutines: %v", g)
	}
	if u := fams["agentkernel_uptime_seconds"]; u == nil || value(u.Metric[0]) <= 0 {
		t.Errorf("uptime: %v", u)
	}
	// Nothing from the process-wide default registry (go_*, process_*).
	for name := range fams {
		if len(name) < 12 || name[:12] != "agentkernel_" {
			t.Errorf("foreign metric %s", name)
		}
	}
}

// TestMetricsPerServer: each Server counts its own requests.
func TestMetricsPerServer(t *testing.T) {
	a, b := testServer(), testServer()
	do(a, "GET", "/health", "")
	do(a, "GET", "/health", "")
	do(b, "GET", "/health", "")
	for s, want := range map[*Server]float64{a: 2, b: 1} {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Host = "localhost"
		s.ServeHTTP(w, req)
		p := expfmt.NewTextParser(model.LegacyValidation)
		fams, err := p.TextToMetricFamilies(w.Body)
		if err != nil {
			t.Fatal(err)
		}
		if m := find(fams["agentkernel_http_requests_total"], map[string]string{"route": "GET /health", "code": "200"}); m == nil || value(m) != want {
			t.Errorf("health requests %v, want %v", m, want)
		}
	}
}

func scrape(t *testing.T, url string) []byte {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// find returns the series of f whose labels are exactly labels.
func find(f *dto.MetricFamily, labels map[string]string) *dto.Metric {
	if f == nil {
		return nil
	}
	for _, m := range f.Metric {
		if len(m.Label) != len(labels) {
			continue
		}
		match := true
		for _, l := range m.Label {
			if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
				match = false
			}
		}
		if match {
			return m
		}
	}
	return nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return -1
}

// secretStandIn is a backend whose runs report what a run's network
// helper reports of its secrets: injections by name and host, and
// requests refused for a misplaced placeholder.
type secretStandIn struct{ standIn }

func (b *secretStandIn) Run(_ context.Context, spec *sandbox.Spec, _ sandbox.Stdio) (sandbox.Result, error) {
	return sandbox.Result{
		SecretInjections: []sandbox.SecretInjection{{Key: "GH_TOKEN", Host: "API.github.test", Count: 3}, {Key: "OPENAI_KEY", Host: "api.openai.test", Count: 1}},
		NetworkDenials: []sandbox.NetworkDenial{
			{Kind: "secret", Name: "evil\"\\\n.test", Reason: "request carries a secret placeholder for another host", Count: 2},
			{Kind: "sni", Name: "blocked.test", Count: 1},
		},
	}, nil
}

// TestMetricsSecrets: what runs' network helpers report of their secrets
// reaches GET /metrics as counters by secret name and host (a host the
// sandbox named, quotes and backslash included, escaped), summed over
// runs and parsed by Prometheus's own parser; no value appears.
func TestMetricsSecrets(t *testing.T) {
	b := &secretStandIn{}
	s := New(Options{
		Manager: sandbox.NewManager(sandbox.ManagerOptions{Backends: []sandbox.Backend{b}, Default: "standin"}),
		Resolve: func(_ context.Context, q RunSpec) (*sandbox.Spec, error) {
			return &sandbox.Spec{Args: q.Args, Rootfs: image.Rootfs{Host: true}}, nil
		},
		InsecureNoAuth: true,
	})
	ts := httptest.NewServer(s)
	defer ts.Close()
	defer s.pools.close()
	for range 2 {
		req, _ := http.NewRequest("POST", ts.URL+"/run", strings.NewReader(`{"command":["true"],"fast":false}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("POST /run: %s %s", resp.Status, body)
		}
	}
	body := scrape(t, ts.URL+"/metrics")
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	for _, c := range []struct {
		family string
		labels map[string]string
		want   float64
	}{
		{"agentkernel_secret_injections_total", map[string]string{"key": "GH_TOKEN", "host": "api.github.test"}, 6},
		{"agentkernel_secret_injections_total", map[string]string{"key": "OPENAI_KEY", "host": "api.openai.test"}, 2},
		{"agentkernel_secret_refusals_total", map[string]string{"host": "evil\"\\\n.test"}, 4},
		{"agentkernel_network_denied_total", map[string]string{"kind": "sni"}, 2},
	} {
		f := fams[c.family]
		if f == nil || f.GetType() != dto.MetricType_COUNTER {
			t.Errorf("%s: no counter family in\n%s", c.family, body)
			continue
		}
		m := find(f, c.labels)
		if m == nil {
			t.Errorf("%s%v: no such series in\n%s", c.family, c.labels, body)
			continue
		}
		if got := value(m); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.family, c.labels, got, c.want)
		}
	}
	if n := len(fams["agentkernel_secret_refusals_total"].GetMetric()); n != 1 {
		t.Errorf("refusals: %d series, want the secret kind's only:\n%s", n, body)
	}
}

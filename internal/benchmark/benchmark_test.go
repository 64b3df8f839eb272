package benchmark

import (
	"bytes"
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	// ceil(10·0.5)−1 = 4, ceil(10·0.95)−1 = 9
	if Percentile(s, 0.5) != 5 || Percentile(s, 0.95) != 10 {
		t.Fatalf("p50 %v p95 %v", Percentile(s, 0.5), Percentile(s, 0.95))
	}
	// ceil(3·0.5)−1 = 1, ceil(3·0.95)−1 = 2
	if Percentile([]float64{10, 20, 30}, 0.5) != 20 || Percentile([]float64{10, 20, 30}, 0.95) != 30 {
		t.Fatal("n=3")
	}
	if Percentile([]float64{7}, 0.95) != 7 || Percentile(nil, 0.5) != 0 {
		t.Fatal("n=1, n=0")
	}
}

// TestBackendArithmetic: known samples give the figures worked out by
// hand from the formulas in the package's doc.
func TestBackendArithmetic(t *testing.T) {
	msd := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	samples := []Sample{
		{Startup: msd(100), Exec: msd(10), Total: msd(200)},
		{Startup: msd(300), Exec: msd(30), Total: msd(400)},
		{Startup: msd(200), Exec: msd(20), Total: msd(400)},
		{Startup: msd(400), Exec: msd(0.5), Total: msd(1000)},
	}
	r := Backend("native", samples)
	want := BackendReport{
		Backend: "native", Iterations: 4,
		// sorted 100 200 300 400: mean 250, p50 = s[ceil(2)−1] = 200, p95 = s[ceil(3.8)−1] = 400
		Startup: Summary{MinMS: 100, AvgMS: 250, P50MS: 200, P95MS: 400, MaxMS: 400},
		// 0.5 10 20 30: mean 15.125 → 15.13
		Exec:  Summary{MinMS: 0.5, AvgMS: 15.13, P50MS: 10, P95MS: 30, MaxMS: 30},
		Total: Summary{MinMS: 200, AvgMS: 500, P50MS: 400, P95MS: 1000, MaxMS: 1000},
		// 4 lifecycles in 2 s
		ThroughputPerSecond: 2,
		Scores: Scores{
			StartupScore:    4,     // 1000/250
			ExecScore:       66.09, // 1000/15.13 = 66.0938
			LatencyScore:    2,     // 1000/500
			ThroughputScore: 2,     // 1000/(1000/2)
			// 0.45·4 + 0.10·66.0938 + 0.30·2 + 0.15·2 = 9.30938
			TotalScore: 9.31,
		},
	}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("got  %+v\nwant %+v", r, want)
	}
	// Below 1 ms a score is 1000.
	if Score(0.2) != 1000 || Score(1) != 1000 || Score(2000) != 0.5 {
		t.Fatal("score")
	}
}

// TestReportJSON: the document's fields are upstream's, by name and
// kind, and total_score is the mean of the backends'.
func TestReportJSON(t *testing.T) {
	b1 := Backend("native", []Sample{{Startup: time.Millisecond * 50, Exec: time.Millisecond * 5, Total: time.Millisecond * 100}})
	b2 := Backend("docker", []Sample{{Startup: time.Millisecond * 500, Exec: time.Millisecond * 50, Total: time.Millisecond * 1000}})
	r := New(time.Date(2026, 11, 26, 18, 0, 0, 0, time.UTC), "alpine:3.20", 1, 2, []BackendReport{b1, b2})
	// native: 0.45·20 + 0.10·200 + 0.30·10 + 0.15·10 = 33.5; docker: 0.45·2 + 0.10·20 + 0.30·1 + 0.15·1 = 3.35
	if b1.Scores.TotalScore != 33.5 || b2.Scores.TotalScore != 3.35 || r.TotalScore != 18.43 {
		t.Fatalf("scores %v %v total %v", b1.Scores.TotalScore, b2.Scores.TotalScore, r.TotalScore)
	}
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) string {
		var k []string
		for n := range m {
			k = append(k, n)
		}
		sort.Strings(k)
		return strings.Join(k, ",")
	}
	// Upstream's keys, and the backends not measured (none here); the
	// runs only when they were timed.
	if got := keys(doc); got != "backends,generated_at,image,measured_iterations,primary_metric,total_score,unavailable,warmup_iterations" {
		t.Fatalf("top-level keys %s", got)
	}
	if doc["primary_metric"] != "total_score" || doc["generated_at"] != "2026-11-26T18:00:00Z" || doc["measured_iterations"] != 1.0 || doc["warmup_iterations"] != 2.0 {
		t.Fatalf("doc %s", raw)
	}
	be := doc["backends"].([]any)[0].(map[string]any)
	if got := keys(be); got != "backend,exec,iterations,scores,startup,throughput_per_second,total" {
		t.Fatalf("backend keys %s", got)
	}
	for _, s := range []string{"startup", "exec", "total"} {
		if got := keys(be[s].(map[string]any)); got != "avg_ms,max_ms,min_ms,p50_ms,p95_ms" {
			t.Fatalf("%s keys %s", s, got)
		}
	}
	if got := keys(be["scores"].(map[string]any)); got != "exec_score,latency_score,startup_score,throughput_score,total_score" {
		t.Fatalf("score keys %s", got)
	}
	// No backend: an empty list, not null, and a total of 0.
	raw, _ = json.Marshal(New(time.Now(), "x", 1, 0, nil))
	if !strings.Contains(string(raw), `"backends":[]`) || !strings.Contains(string(raw), `"total_score":0`) {
		t.Fatalf("empty report %s", raw)
	}
	var tab bytes.Buffer
	if err := WriteTable(&tab, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Backend", "Startup", "Exec", "Total", "Throughput", "Score", "native", "33.50", "p95", "Total score: 18.43"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}
}

func TestRunsMediansAndRatios(t *testing.T) {
	if Median([]float64{3, 1, 2}) != 2 || Median([]float64{4, 1, 3, 2}) != 2.5 || Median(nil) != 0 {
		t.Fatal("Median")
	}
	msd := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	cold := Case(CaseCold, "run", msd(400, 100, 300, 200))
	if cold.Runs != 4 || cold.MedianMS != 250 || cold.MinMS != 100 || cold.MaxMS != 400 || cold.P95MS != 400 {
		t.Fatalf("cold %+v", cold)
	}
	r := Runs("gvisor", []RunCase{cold, Case(CasePooled, "pooled", msd(50, 50, 60)), Case(CaseExec, "exec", msd(20)),
		Case(CaseTool, "runsc run", msd(200)), {Case: "other", Unavailable: "why"}})
	want := map[string]float64{"pooled_over_cold": 0.2, "cold_over_tool": 1.25, "pooled_over_tool": 0.25, "exec_over_tool": 0.1}
	if !r.Available || len(r.Ratios) != len(want) {
		t.Fatalf("ratios %v", r.Ratios)
	}
	for k, v := range want {
		if r.Ratios[k] != v {
			t.Errorf("%s = %v, want %v", k, r.Ratios[k], v)
		}
	}
	// No tool: no ratio over it.
	r = Runs("native", []RunCase{cold, {Case: CaseTool, Unavailable: "no tool underneath"}})
	if len(r.Ratios) != 0 {
		t.Errorf("ratios without the other case: %v", r.Ratios)
	}
	var b strings.Builder
	if err := WriteRuns(&b, []BackendRuns{Runs("gvisor", []RunCase{cold, Case(CaseTool, "runsc run", msd(200))}),
		{Backend: "docker", Reason: "no engine answers"}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"250.00 ms", "1.25", "docker", "not available", "no engine answers"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, b.String())
		}
	}
}

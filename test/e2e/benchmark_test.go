//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/benchmark"
)

// TestBenchmarkNative: a real benchmark of the native backend, with a
// backend this build does not have skipped with a line saying why: the report's JSON, on stdout and in --output's file, with
// the lifecycles counted and timed and nothing left behind.
func TestBenchmarkNative(t *testing.T) {
	a, ref := withRegistry(t)
	out := filepath.Join(a.home, "bench.json")
	r := a.run("benchmark", "--backends", "native,firecracker", "--iterations", "3", "--warmup", "1", "--image", ref, "--json", "--output", out)
	if r.code != 0 {
		t.Fatalf("benchmark: %v", r)
	}
	if strings.Count(r.stderr, "skipping firecracker: ") != 1 || strings.Count(r.stderr, "skipping") != 1 {
		t.Errorf("the skipped backend: %q", r.stderr)
	}
	var rep benchmark.Report
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("report: %v\n%s", err, r.stdout)
	}
	if rep.Image != ref || rep.MeasuredIterations != 3 || rep.WarmupIterations != 1 || rep.PrimaryMetric != "total_score" || len(rep.Backends) != 1 {
		t.Fatalf("report %+v", rep)
	}
	b := rep.Backends[0]
	if b.Backend != "native" || b.Iterations != 3 || b.Startup.MinMS <= 0 || b.Exec.MinMS <= 0 || b.Total.AvgMS < b.Startup.AvgMS+b.Exec.AvgMS ||
		b.Total.MaxMS < b.Total.P95MS || b.Total.P95MS < b.Total.P50MS || b.Total.P50MS < b.Total.MinMS || b.ThroughputPerSecond <= 0 {
		t.Errorf("native's figures: %+v", b)
	}
	if b.Scores.TotalScore <= 0 || rep.TotalScore != b.Scores.TotalScore {
		t.Errorf("scores %+v, total %v", b.Scores, rep.TotalScore)
	}
	if f, err := os.ReadFile(out); err != nil || string(f) != r.stdout {
		t.Errorf("--output's file: %v\n%s", err, f)
	}
	r = a.run("sandbox", "list", "-a")
	if r.code != 0 || strings.Contains(r.stdout, "agentkernel-bench") {
		t.Errorf("left: %v", r)
	}
	// The table.
	r = a.run("benchmark", "--backends", "native", "--iterations", "1", "--warmup", "0", "--image", ref)
	if r.code != 0 || !strings.Contains(r.stdout, "Backend") || !strings.Contains(r.stdout, "native") || !strings.Contains(r.stdout, "p95") || !strings.Contains(r.stdout, "Total score:") {
		t.Errorf("table: %v", r)
	}
	// Nothing measurable: the report, then exit 125.
	r = a.run("benchmark", "--backends", "firecracker", "--iterations", "1", "--image", ref, "--json")
	if r.code != 125 || !strings.Contains(r.stdout, `"backends": []`) {
		t.Errorf("nothing measured: %v", r)
	}
}

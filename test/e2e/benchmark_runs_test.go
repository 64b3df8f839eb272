//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/bench/harness"
	"github.com/agentkernel/agentkernel/internal/benchmark"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// benchRunsEnv, set to a number N, makes TestBenchmarkRuns first run the
// benchmark with N iterations and log its table (bench/README.md).
const benchRunsEnv = "AGENTKERNEL_E2E_BENCH_RUNS"

// TestBenchmarkRuns: benchmark's one-off runs on real backends (native,
// gvisor with runsc, docker on a private dockerd): per backend the cold,
// pooled and exec cases and the tool underneath (runsc run, docker run)
// timed, with medians and the ratios between them in the JSON and the
// table; a backend this build lacks reported as not available, with
// the reason, in both; nothing left behind.
func TestBenchmarkRuns(t *testing.T) {
	a, ref := withGVisor(t)
	work, err := os.MkdirTemp("", "ake2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(work) })
	backends := "native,gvisor,firecracker"
	docker := false
	if host, stop, err := harness.StartPrivateDocker(filepath.Join(work, "docker")); err != nil {
		testenv.Missing(t, "docker: %v", err)
	} else {
		t.Cleanup(stop)
		a.env = append(a.env, "DOCKER_HOST="+host)
		cfg := filepath.Join(a.home, ".config", "agentkernel", "config.toml")
		if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfg, []byte("[security]\nallow_degraded = [\"landlock\"]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		backends += ",docker"
		docker = true
	}
	if host, stop, err := harness.StartPodmanService(filepath.Join(work, "podman")); err != nil {
		testenv.Missing(t, "podman: %v", err)
	} else {
		t.Cleanup(stop)
		a.env = append(a.env, "CONTAINER_HOST="+host)
		backends += ",podman"
	}
	iterations := "3"
	if n := os.Getenv(benchRunsEnv); n != "" {
		// Measuring: the table of n runs per case, logged.
		r := a.runFor(30*time.Minute, "benchmark", "--backends", strings.Replace(backends, ",firecracker", "", 1), "--iterations", n, "--warmup", "2", "--image", ref)
		t.Logf("benchmark, %s iterations:\n%s\n%s", n, r.stdout, r.stderr)
	}
	r := a.runFor(5*time.Minute, "benchmark", "--backends", backends, "--iterations", iterations, "--warmup", "1", "--image", ref, "--json")
	if r.code != 0 {
		t.Fatalf("benchmark: %v", r)
	}
	var rep benchmark.Report
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("report: %v\n%s", err, r.stdout)
	}
	if len(rep.Unavailable) != 1 || rep.Unavailable[0].Backend != "firecracker" || rep.Unavailable[0].Reason == "" {
		t.Errorf("unavailable: %+v", rep.Unavailable)
	}
	runs := map[string]benchmark.BackendRuns{}
	for _, b := range rep.Runs {
		runs[b.Backend] = b
	}
	if fc := runs["firecracker"]; fc.Available || fc.Reason == "" {
		t.Errorf("firecracker's runs: %+v", fc)
	}
	timed := func(b, c string) benchmark.RunCase {
		t.Helper()
		for _, rc := range runs[b].Cases {
			if rc.Case == c {
				if rc.Unavailable != "" || rc.Runs != 3 || rc.MinMS <= 0 || rc.MedianMS < rc.MinMS || rc.P95MS < rc.MedianMS || rc.MaxMS < rc.P95MS {
					t.Errorf("%s %s: %+v", b, c, rc)
				}
				return rc
			}
		}
		t.Errorf("%s: no %s case: %+v", b, c, runs[b])
		return benchmark.RunCase{}
	}
	want := map[string][]string{"native": {"cold", "pooled", "exec"}, "gvisor": {"cold", "pooled", "exec", "tool"}}
	if docker {
		want["docker"] = want["gvisor"]
	}
	if strings.Contains(backends, "podman") {
		want["podman"] = want["gvisor"]
	}
	for b, cases := range want {
		if !runs[b].Available {
			t.Errorf("%s's runs: %+v", b, runs[b])
			continue
		}
		for _, c := range cases {
			timed(b, c)
		}
		if runs[b].Ratios["pooled_over_cold"] <= 0 {
			t.Errorf("%s: ratios %v", b, runs[b].Ratios)
		}
		if len(cases) == 4 && (runs[b].Ratios["cold_over_tool"] <= 0 || runs[b].Ratios["pooled_over_tool"] <= 0 || runs[b].Ratios["exec_over_tool"] <= 0) {
			t.Errorf("%s: ratios %v", b, runs[b].Ratios)
		}
	}
	for _, rc := range runs["native"].Cases {
		if rc.Case == "tool" && rc.Unavailable == "" {
			t.Errorf("native has no tool underneath: %+v", rc)
		}
	}
	t.Logf("runs: %+v", rep.Runs)
	// The table names the cases, the unavailable backend and why.
	r = a.run("benchmark", "--backends", "gvisor,firecracker", "--iterations", "1", "--warmup", "0", "--image", ref)
	for _, s := range []string{"One-off runs", "pooled", "runsc", "firecracker: not measured:", "not available"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("table lacks %q: %v", s, r)
		}
	}
	r = a.run("sandbox", "list", "-a")
	if r.code != 0 || strings.Contains(r.stdout, "agentkernel-bench") {
		t.Errorf("left: %v", r)
	}
	if left, _ := filepath.Glob(filepath.Join(a.dataDir, "bench-runsc-*")); len(left) > 0 {
		t.Errorf("left: %v", left)
	}
}

// runFor is run with a longer limit than its minute.
func (a *ak) runFor(limit time.Duration, args ...string) result {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	c := a.cmd(ctx, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	start := time.Now()
	err := c.Run()
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() < 0 {
			a.t.Fatalf("agentkernel %v: %v\n%s", args, err, r.stderr)
		}
		r.code = ee.ExitCode()
	}
	return r
}

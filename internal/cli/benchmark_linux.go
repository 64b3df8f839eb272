package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/atomicfile"
	"github.com/agentkernel/agentkernel/internal/benchmark"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// benchmarkBackends are the backends `benchmark` measures by default.
var benchmarkBackends = []string{"native", "docker", "podman", "gvisor"}

type benchmarkOptions struct {
	backends   []string
	iterations int
	warmup     int
	image      string
	asJSON     bool
	output     string
	runs       bool
}

func newBenchmarkCmd(a *App) *cobra.Command {
	o := benchmarkOptions{backends: benchmarkBackends, runs: true}
	cmd := &cobra.Command{
		Use:   "benchmark [flags]",
		Short: "Time persistent sandboxes' lifecycles on each backend and score them",
		Long: `Measure each backend with whole sandbox lifecycles: create and start a
persistent sandbox (1 CPU, 256 MiB of memory, no network) named
agentkernel-bench-<backend>-<i>, run 'echo hello' in it, stop it and remove
it. --warmup lifecycles come first and are not counted; then --iterations
are measured. The image is made ready once before anything is timed.

A backend that cannot host persistent sandboxes here (no engine answers,
no runsc, not root, ...) is not measured: one line on stderr says why, and
the report names it with the reason (the table's last lines, "unavailable"
in JSON).

Then, unless --runs=false, one-off runs of /bin/true on each backend (the
restrictive profile, the same limits, no network), interleaved, --warmup
untimed first: "cold" (a sandbox built for the run, as 'agentkernel run
--no-daemon'), "pooled" (a sandbox prepared ahead, as a warm pool's, its
preparation not timed), "exec" (a round trip into a running persistent
sandbox) and "tool", the tool underneath running /bin/true by itself where
it is installed: docker run or podman run (--rm, no network, the same
limits) of the image the backend loaded into the engine, runsc run of a
bundle whose root is the image's layers. Each case's median, min and p95,
and the medians over the cold run's and the tool's ("runs" in JSON, with
"ratios": pooled_over_cold, cold_over_tool, pooled_over_tool,
exec_over_tool). A case that cannot be timed here says why.

The report (the table, or --json) gives per backend the startup (create
and start), exec and whole-lifecycle times (min, mean, p50, p95, max: the
percentile p of n sorted times is the (ceil(n*p))-th), the lifecycles per
second, and scores: score(ms) = 1000/max(ms, 1) of the mean startup, exec
and lifecycle times; the throughput's score is its lifecycles per second;
total = 0.45*startup + 0.10*exec + 0.30*lifecycle + 0.15*throughput. The
report's total_score is the mean of the backends'. Numbers depend on the
machine and on what else runs on it.`,
		Example: `  agentkernel benchmark
  agentkernel benchmark --backends native,docker --iterations 20 --warmup 3
  agentkernel benchmark --json > bench.json
  agentkernel benchmark --output bench.json --image python:3.12-slim`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.benchmark(cmd.Context(), &o)
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVar(&o.backends, "backends", o.backends, "backends to measure, comma-separated")
	fs.IntVarP(&o.iterations, "iterations", "n", 10, "measured lifecycles per backend")
	fs.IntVar(&o.warmup, "warmup", 2, "lifecycles per backend run first and not counted")
	fs.StringVar(&o.image, "image", "alpine:3.20", "image of the sandboxes")
	fs.BoolVar(&o.asJSON, "json", false, "print the report as JSON instead of a table")
	fs.StringVarP(&o.output, "output", "o", "", "also write the report as JSON to FILE")
	fs.BoolVar(&o.runs, "runs", o.runs, "also time one-off runs of /bin/true per backend: cold, pooled, exec, and the tool underneath")
	return cmd
}

func (a *App) benchmark(ctx context.Context, o *benchmarkOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.iterations < 1 || o.iterations > 10000 {
		return usageError("--iterations must be between 1 and 10000")
	}
	if o.warmup < 0 || o.warmup > 1000 {
		return usageError("--warmup must be between 0 and 1000")
	}
	if len(o.backends) == 0 {
		return usageError("--backends names no backend")
	}
	m, done, err := a.sandboxes()
	if err != nil {
		return err
	}
	defer done()
	var reports []benchmark.BackendReport
	var unavailable []benchmark.Unavailable
	var runs []benchmark.BackendRuns
	for _, name := range o.backends {
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" {
			continue
		}
		samples, err := a.benchmarkBackend(ctx, m, name, o)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fmt.Fprintf(a.Stderr, "agentkernel: benchmark: skipping %s: %s\n", name, oneLine(err))
			unavailable = append(unavailable, benchmark.Unavailable{Backend: name, Reason: oneLine(err)})
		} else {
			reports = append(reports, benchmark.Backend(name, samples))
		}
		if o.runs {
			br := a.benchmarkRuns(ctx, m, name, o)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			runs = append(runs, br)
		}
	}
	r := benchmark.New(time.Now(), o.image, o.iterations, o.warmup, reports)
	r.Unavailable = append(r.Unavailable, unavailable...)
	r.Runs = runs
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	raw = append(raw, '\n')
	if o.output != "" {
		if err := atomicfile.WriteFile(o.output, raw, 0o644); err != nil {
			return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("benchmark: writing %s: %w", o.output, err)}
		}
	}
	if o.asJSON {
		_, err = a.Stdout.Write(raw)
	} else {
		err = benchmark.WriteTable(a.Stdout, r)
	}
	if err != nil {
		return err
	}
	if len(reports) == 0 {
		return &ExitError{Code: ExitAgentkernel, Err: errors.New("benchmark: no backend could be measured"), Hint: "'agentkernel doctor' says what this machine offers"}
	}
	return nil
}

// oneLine is err's text on one line.
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// benchmarkBackend runs o's lifecycles on backend name and returns the
// measured ones.
func (a *App) benchmarkBackend(ctx context.Context, m *sandbox.Manager, name string, o *benchmarkOptions) ([]benchmark.Sample, error) {
	if _, err := m.Backend(name); err != nil {
		return nil, err
	}
	co := &createOptions{backend: name, overrides: policy.Overrides{Image: o.image, Memory: "256m", CPUs: 1, NoNetwork: true,
		Set: map[string]bool{"image": true, "memory": true, "cpus": true, "no-network": true}}}
	_, req, err := a.resolveCreate("agentkernel-bench-"+name+"-0", co)
	if err != nil {
		return nil, err
	}
	// The image, made ready once: pulling it is not what is measured.
	if err := m.PrepareRootfs(ctx, req.Spec); err != nil {
		return nil, err
	}
	var samples []benchmark.Sample
	for i := 0; i < o.warmup+o.iterations; i++ {
		sb := fmt.Sprintf("agentkernel-bench-%s-%d", name, i)
		spec := *req.Spec
		s, err := benchmarkLifecycle(ctx, m, sb, &spec, name)
		if err != nil {
			return nil, err
		}
		if i >= o.warmup {
			samples = append(samples, s)
		}
	}
	return samples, nil
}

// benchmarkLifecycle creates and starts sandbox name, runs echo hello in
// it, stops and removes it, and times each part. A sandbox of that name
// left by an earlier benchmark is removed first; this one is removed
// whatever happens.
func benchmarkLifecycle(ctx context.Context, m *sandbox.Manager, name string, spec *sandbox.Spec, backend string) (benchmark.Sample, error) {
	if _, err := m.Get(ctx, name); err == nil {
		if err := m.Remove(ctx, name, true); err != nil {
			return benchmark.Sample{}, err
		}
	}
	start := time.Now()
	if _, _, err := m.Create(ctx, sandbox.CreateRequest{Name: name, Spec: spec, Start: true, Backend: backend}); err != nil {
		return benchmark.Sample{}, err
	}
	removed := false
	defer func() {
		if !removed {
			_ = m.Remove(context.WithoutCancel(ctx), name, true)
		}
	}()
	started := time.Now()
	var out, errOut bytes.Buffer
	res, err := m.Exec(ctx, name, sandbox.ExecRequest{Args: []string{"echo", "hello"}}, sandbox.Stdio{Stdout: &out, Stderr: &errOut}, nil)
	if err != nil {
		return benchmark.Sample{}, err
	}
	if res.ExitCode != 0 || out.String() != "hello\n" {
		return benchmark.Sample{}, fmt.Errorf("echo hello in %s: exit %d, output %q %q", name, res.ExitCode, out.String(), errOut.String())
	}
	execd := time.Now()
	if _, err := m.Stop(ctx, name); err != nil {
		return benchmark.Sample{}, err
	}
	if err := m.Remove(ctx, name, false); err != nil {
		return benchmark.Sample{}, err
	}
	removed = true
	end := time.Now()
	return benchmark.Sample{Startup: started.Sub(start), Exec: execd.Sub(started), Total: end.Sub(start)}, nil
}

// Package benchmark is the arithmetic and the report of `agentkernel
// benchmark`: per backend, the timings of measured sandbox lifecycles
// (create and start, one exec, stop and remove) summed up as upstream's
// report has them, the scores, the JSON document and the table. It runs
// nothing itself: the CLI times the lifecycles (cli/benchmark_linux.go)
// and hands this package the numbers.
//
// The arithmetic: a summary's percentile p of n sorted values is
// sorted[ceil(n·p)−1]; score(ms) = 1000/max(ms, 1), taken of the
// summary's mean (startup_score, exec_score, and latency_score of the
// whole lifecycle); throughput_per_second is the measured lifecycles
// over the seconds they took together, and throughput_score is score of
// the milliseconds one lifecycle takes at that rate (1000/throughput),
// which is the throughput itself below 1000 per second; total_score =
// 0.45·startup + 0.10·exec + 0.30·latency + 0.15·throughput; the
// report's total_score is the mean of its backends'. Every figure is
// rounded to 2 decimals.
//
// Beside upstream's report: the backends that could not be measured,
// each with the reason (Unavailable), and one-off runs of /bin/true per
// backend (BackendRuns): the cases cold, pooled, exec and the tool
// underneath, each's median (the middle value, or the mean of the two
// middle ones), min, p95 and max, and the ratios of their medians.
package benchmark

import (
	"fmt"
	"io"
	"math"
	"sort"
	"text/tabwriter"
	"time"
)

// Summary sums up one measurement over the iterations, in milliseconds.
type Summary struct {
	MinMS float64 `json:"min_ms"`
	AvgMS float64 `json:"avg_ms"`
	P50MS float64 `json:"p50_ms"`
	P95MS float64 `json:"p95_ms"`
	MaxMS float64 `json:"max_ms"`
}

// Scores are a backend's scores (higher is better).
type Scores struct {
	StartupScore    float64 `json:"startup_score"`
	ExecScore       float64 `json:"exec_score"`
	LatencyScore    float64 `json:"latency_score"`
	ThroughputScore float64 `json:"throughput_score"`
	TotalScore      float64 `json:"total_score"`
}

// BackendReport is one backend's part of the report.
type BackendReport struct {
	Backend             string  `json:"backend"`
	Iterations          int     `json:"iterations"`
	Startup             Summary `json:"startup"`
	Exec                Summary `json:"exec"`
	Total               Summary `json:"total"`
	ThroughputPerSecond float64 `json:"throughput_per_second"`
	Scores              Scores  `json:"scores"`
}

// Report is the whole report, as `benchmark --json` writes it: upstream's
// fields, then the backends that could not be measured (with why) and
// the one-off runs (Runs).
type Report struct {
	GeneratedAt        string          `json:"generated_at"`
	Image              string          `json:"image"`
	MeasuredIterations int             `json:"measured_iterations"`
	WarmupIterations   int             `json:"warmup_iterations"`
	PrimaryMetric      string          `json:"primary_metric"`
	TotalScore         float64         `json:"total_score"`
	Backends           []BackendReport `json:"backends"`
	// Unavailable are the backends asked for whose lifecycles could not
	// be measured here, each with the reason.
	Unavailable []Unavailable `json:"unavailable"`
	// Runs are the one-off runs of /bin/true per backend (absent with
	// --runs=false).
	Runs []BackendRuns `json:"runs,omitempty"`
}

// Unavailable is a backend that was not measured, and why.
type Unavailable struct {
	Backend string `json:"backend"`
	Reason  string `json:"reason"`
}

// The cases of a backend's runs.
const (
	// CaseCold is a run of /bin/true in a sandbox built for it.
	CaseCold = "cold"
	// CasePooled is the same run in a sandbox prepared ahead (a warm
	// pool's), its preparation not timed.
	CasePooled = "pooled"
	// CaseExec is /bin/true exec'd in a running persistent sandbox.
	CaseExec = "exec"
	// CaseTool is the tool underneath running /bin/true itself (docker
	// run, podman run, runsc run).
	CaseTool = "tool"
)

// RunCase is one timed case of a backend's runs, in milliseconds; a case
// that could not be timed here has Unavailable set and no figures.
type RunCase struct {
	Case        string  `json:"case"`
	Command     string  `json:"command"`
	Runs        int     `json:"runs"`
	MedianMS    float64 `json:"median_ms"`
	MinMS       float64 `json:"min_ms"`
	P95MS       float64 `json:"p95_ms"`
	MaxMS       float64 `json:"max_ms"`
	Unavailable string  `json:"unavailable,omitempty"`
}

// BackendRuns are one backend's run cases and the ratios of their
// medians: pooled_over_cold, cold_over_tool, pooled_over_tool,
// exec_over_tool (each only where both cases were timed). A backend
// that could not be run at all has Available false and the reason.
type BackendRuns struct {
	Backend   string             `json:"backend"`
	Available bool               `json:"available"`
	Reason    string             `json:"reason,omitempty"`
	Cases     []RunCase          `json:"cases"`
	Ratios    map[string]float64 `json:"ratios"`
}

// Median is the middle of the values (the mean of the two middle ones
// for an even count; 0 for none).
func Median(v []float64) float64 {
	n := len(v)
	if n == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Case makes a timed case of its durations.
func Case(name, command string, times []time.Duration) RunCase {
	c := RunCase{Case: name, Command: command, Runs: len(times)}
	if len(times) == 0 {
		return c
	}
	v := make([]float64, len(times))
	for i, d := range times {
		v[i] = ms(d)
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	c.MedianMS, c.MinMS, c.P95MS, c.MaxMS = Round2(Median(v)), Round2(s[0]), Round2(Percentile(s, 0.95)), Round2(s[len(s)-1])
	return c
}

// Runs makes a backend's runs of its cases, with the ratios of their
// medians.
func Runs(backend string, cases []RunCase) BackendRuns {
	r := BackendRuns{Backend: backend, Available: true, Cases: cases, Ratios: map[string]float64{}}
	if r.Cases == nil {
		r.Cases = []RunCase{}
	}
	med := map[string]float64{}
	for _, c := range cases {
		if c.Unavailable == "" && c.Runs > 0 && c.MedianMS > 0 {
			med[c.Case] = c.MedianMS
		}
	}
	for _, q := range [][2]string{{CasePooled, CaseCold}, {CaseCold, CaseTool}, {CasePooled, CaseTool}, {CaseExec, CaseTool}} {
		a, okA := med[q[0]]
		b, okB := med[q[1]]
		if okA && okB {
			r.Ratios[q[0]+"_over_"+q[1]] = Round2(a / b)
		}
	}
	return r
}

// Sample is one measured lifecycle.
type Sample struct {
	// Startup is create and start; Exec the one command; Total the whole
	// lifecycle, stop and remove included.
	Startup, Exec, Total time.Duration
}

// Round2 rounds to 2 decimals.
func Round2(x float64) float64 { return math.Round(x*100) / 100 }

// Percentile is sorted[ceil(n·p)−1] of ascending values (0 for none).
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	i := int(math.Ceil(float64(n)*p)) - 1
	i = max(0, min(i, n-1))
	return sorted[i]
}

// Summarize sums up values in milliseconds.
func Summarize(ms []float64) Summary {
	if len(ms) == 0 {
		return Summary{}
	}
	s := append([]float64(nil), ms...)
	sort.Float64s(s)
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	return Summary{MinMS: Round2(s[0]), AvgMS: Round2(sum / float64(len(s))), P50MS: Round2(Percentile(s, 0.50)),
		P95MS: Round2(Percentile(s, 0.95)), MaxMS: Round2(s[len(s)-1])}
}

// Score is 1000/max(ms, 1).
func Score(ms float64) float64 { return 1000 / math.Max(ms, 1) }

// Backend makes a backend's report from its measured samples.
func Backend(name string, samples []Sample) BackendReport {
	var st, ex, tot []float64
	var all time.Duration
	for _, s := range samples {
		st = append(st, ms(s.Startup))
		ex = append(ex, ms(s.Exec))
		tot = append(tot, ms(s.Total))
		all += s.Total
	}
	r := BackendReport{Backend: name, Iterations: len(samples), Startup: Summarize(st), Exec: Summarize(ex), Total: Summarize(tot)}
	if len(samples) == 0 {
		return r
	}
	throughput := 0.0
	if all > 0 {
		throughput = float64(len(samples)) / all.Seconds()
	}
	r.ThroughputPerSecond = Round2(throughput)
	sc := Scores{StartupScore: Score(r.Startup.AvgMS), ExecScore: Score(r.Exec.AvgMS), LatencyScore: Score(r.Total.AvgMS)}
	if throughput > 0 {
		sc.ThroughputScore = Score(1000 / throughput)
	}
	sc.TotalScore = 0.45*sc.StartupScore + 0.10*sc.ExecScore + 0.30*sc.LatencyScore + 0.15*sc.ThroughputScore
	r.Scores = Scores{StartupScore: Round2(sc.StartupScore), ExecScore: Round2(sc.ExecScore), LatencyScore: Round2(sc.LatencyScore),
		ThroughputScore: Round2(sc.ThroughputScore), TotalScore: Round2(sc.TotalScore)}
	return r
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// New makes the report of backends measured at now.
func New(now time.Time, image string, measured, warmup int, backends []BackendReport) Report {
	r := Report{GeneratedAt: now.UTC().Format(time.RFC3339), Image: image, MeasuredIterations: measured, WarmupIterations: warmup,
		PrimaryMetric: "total_score", Backends: backends}
	if r.Backends == nil {
		r.Backends = []BackendReport{}
	}
	r.Unavailable = []Unavailable{}
	if len(backends) > 0 {
		sum := 0.0
		for _, b := range backends {
			sum += b.Scores.TotalScore
		}
		r.TotalScore = Round2(sum / float64(len(backends)))
	}
	return r
}

// WriteTable writes the report as a table: per backend the means and a
// p95 row, then the overall score.
func WriteTable(w io.Writer, r Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Backend\tStartup\tExec\tTotal\tThroughput\tScore")
	for _, b := range r.Backends {
		fmt.Fprintf(tw, "%s\t%.2f ms\t%.2f ms\t%.2f ms\t%.2f/s\t%.2f\n", b.Backend, b.Startup.AvgMS, b.Exec.AvgMS, b.Total.AvgMS, b.ThroughputPerSecond, b.Scores.TotalScore)
		fmt.Fprintf(tw, "  p95\t%.2f ms\t%.2f ms\t%.2f ms\t\t\n", b.Startup.P95MS, b.Exec.P95MS, b.Total.P95MS)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "\nTotal score: %.2f (%d measured, %d warm-up iterations per backend, image %s)\n", r.TotalScore, r.MeasuredIterations, r.WarmupIterations, r.Image); err != nil {
		return err
	}
	for _, u := range r.Unavailable {
		if _, err := fmt.Fprintf(w, "%s: not measured: %s\n", u.Backend, u.Reason); err != nil {
			return err
		}
	}
	return WriteRuns(w, r.Runs)
}

// WriteRuns writes the runs as a table: per backend and case the median,
// min and p95, and the median over the cold run's and over the tool's;
// a case or backend not timed says why.
func WriteRuns(w io.Writer, runs []BackendRuns) error {
	if len(runs) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w, "\nOne-off runs of /bin/true (medians):"); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Backend\tCase\tRuns\tMedian\tMin\tp95\t× cold\t× tool\tCommand")
	for _, b := range runs {
		if !b.Available {
			fmt.Fprintf(tw, "%s\tnot available\t\t\t\t\t\t\t%s\n", b.Backend, b.Reason)
			continue
		}
		var cold, tool float64
		for _, c := range b.Cases {
			if c.Unavailable == "" && c.Case == CaseCold {
				cold = c.MedianMS
			}
			if c.Unavailable == "" && c.Case == CaseTool {
				tool = c.MedianMS
			}
		}
		for _, c := range b.Cases {
			if c.Unavailable != "" {
				fmt.Fprintf(tw, "%s\t%s\tnot timed\t\t\t\t\t\t%s: %s\n", b.Backend, c.Case, c.Command, c.Unavailable)
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f ms\t%.2f ms\t%.2f ms\t%s\t%s\t%s\n", b.Backend, c.Case, c.Runs, c.MedianMS, c.MinMS, c.P95MS, ratio(c.MedianMS, cold), ratio(c.MedianMS, tool), c.Command)
		}
	}
	return tw.Flush()
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

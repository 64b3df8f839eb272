// Package harness times commands side by side and reports medians, p90s
// and ratios against a baseline measured in the same run. Absolute times
// on shared machines drift; ratios taken in one run are what we compare.
package harness

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Case is one command to time.
type Case struct {
	Name string
	Argv []string
	// Setup, when set, runs once before the timed runs (e.g. to warm a cache).
	Setup func(ctx context.Context) error
	// Settle is how long to wait after each run of this case before the
	// next run of any case: work the case leaves behind in the background
	// (a daemon refilling its warm pool) must not land in another case's
	// time.
	Settle time.Duration
}

// Stats summarises the wall times of one case.
type Stats struct {
	Name    string
	Runs    int
	Median  time.Duration
	P90     time.Duration
	Min     time.Duration
	Failed  int
	LastErr error
}

// Options controls a measurement.
type Options struct {
	Runs   int // timed runs per case
	Warmup int // untimed runs per case before timing
	// Interleave alternates cases run by run so drift hits all equally;
	// each round starts one case later, so no case always follows the same
	// one.
	Interleave bool
}

// Run times every case and returns one Stats per case, in order.
func Run(ctx context.Context, cases []Case, o Options) []Stats {
	if o.Runs <= 0 {
		o.Runs = 20
	}
	samples := make([][]time.Duration, len(cases))
	stats := make([]Stats, len(cases))
	for i, c := range cases {
		stats[i].Name = c.Name
		if c.Setup != nil {
			if err := c.Setup(ctx); err != nil {
				stats[i].LastErr = fmt.Errorf("setup: %w", err)
				stats[i].Failed = o.Runs
				continue
			}
		}
		for w := 0; w < o.Warmup; w++ {
			_ = runOnce(ctx, c.Argv)
		}
	}
	one := func(i int) {
		if stats[i].LastErr != nil && strings.HasPrefix(stats[i].LastErr.Error(), "setup:") {
			return
		}
		start := time.Now()
		err := runOnce(ctx, cases[i].Argv)
		d := time.Since(start)
		if err != nil {
			stats[i].Failed++
			stats[i].LastErr = err
			return
		}
		samples[i] = append(samples[i], d)
		if cases[i].Settle > 0 {
			time.Sleep(cases[i].Settle)
		}
	}
	if o.Interleave {
		for r := 0; r < o.Runs; r++ {
			for k := range cases {
				one((r + k) % len(cases))
			}
		}
	} else {
		for i := range cases {
			for r := 0; r < o.Runs; r++ {
				one(i)
			}
		}
	}
	for i := range cases {
		s := samples[i]
		sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
		stats[i].Runs = len(s)
		if len(s) > 0 {
			stats[i].Median = Percentile(s, 50)
			stats[i].P90 = Percentile(s, 90)
			stats[i].Min = s[0]
		}
	}
	return stats
}

func runOnce(ctx context.Context, argv []string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Percentile returns the p-th percentile of sorted samples (nearest rank).
func Percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100
	if rank < 1 {
		rank = 1
	}
	if rank > len(sorted) {
		rank = len(sorted)
	}
	return sorted[rank-1]
}

// Report writes a Markdown table: one row per case with median, p90 and
// the ratio of its median to the baseline's (the first case that ran).
func Report(w io.Writer, stats []Stats) {
	var base time.Duration
	for _, s := range stats {
		if s.Runs > 0 {
			base = s.Median
			break
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "| case\t| runs\t| median\t| p90\t| min\t| × baseline\t|")
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|")
	for _, s := range stats {
		if s.Runs == 0 {
			fmt.Fprintf(tw, "| %s\t| 0\t| failed: %v\t|\t|\t|\t|\n", s.Name, oneLine(s.LastErr))
			continue
		}
		ratio := "-"
		if base > 0 {
			ratio = fmt.Sprintf("%.2f", float64(s.Median)/float64(base))
		}
		fmt.Fprintf(tw, "| %s\t| %d\t| %s\t| %s\t| %s\t| %s\t|\n", s.Name, s.Runs, ms(s.Median), ms(s.P90), ms(s.Min), ratio)
	}
	tw.Flush()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func oneLine(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return s
}

package harness

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	s := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		p    int
		want time.Duration
	}{{50, 5}, {90, 9}, {100, 10}, {1, 1}} {
		if got := Percentile(s, c.p); got != c.want {
			t.Errorf("p%d = %v, want %v", c.p, got, c.want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("empty input must give 0")
	}
}

func TestRunAndReport(t *testing.T) {
	stats := Run(context.Background(), []Case{
		{Name: "true", Argv: []string{"true"}},
		{Name: "false", Argv: []string{"false"}},
	}, Options{Runs: 3, Interleave: true})
	if stats[0].Runs != 3 || stats[0].Median <= 0 {
		t.Fatalf("true: %+v", stats[0])
	}
	if stats[1].Runs != 0 || stats[1].Failed != 3 {
		t.Fatalf("false must fail every run: %+v", stats[1])
	}
	var buf bytes.Buffer
	Report(&buf, stats)
	out := buf.String()
	if !strings.Contains(out, "| true") || !strings.Contains(out, "1.00") || !strings.Contains(out, "failed") {
		t.Fatalf("report:\n%s", out)
	}
}

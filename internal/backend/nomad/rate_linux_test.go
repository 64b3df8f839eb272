//go:build linux

package nomad

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"
)

// TestCreateRate measures, on a real dev agent, sandboxes created and
// ready (agentkernel driver: the node's agentkernel running a native
// sandbox of the host image), cold (a job of their own) and pooled
// (taken from a warm pool filled and answering beforehand), against a
// plain raw_exec job running sleep, all measured the same way and one
// after the other: from the first request to the task running
// ("running"; for a pooled sandbox, its job already runs), and to the
// first command returned through the alloc exec API ("first exec": for
// the sandboxes `agentkernel exec NAME -- true` on the node, for the
// plain job `true` in its task); then the exec round trip of `true`,
// five per sandbox. Each series' jobs stay until it ends and are then
// stopped, their tasks waited for, so that no teardown on the node runs
// during a measured start. A measurement, not a check: set
// AGENTKERNEL_NOMAD_BENCH=1 (AGENTKERNEL_NOMAD_BENCH_N, default 10).
func TestCreateRate(t *testing.T) {
	if os.Getenv("AGENTKERNEL_NOMAD_BENCH") != "1" {
		t.Skip("a measurement: set AGENTKERNEL_NOMAD_BENCH=1")
	}
	n := 10
	if v, err := strconv.Atoi(os.Getenv("AGENTKERNEL_NOMAD_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	l := startLab(t)
	ak := buildAgentkernel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	b := newBackend(t, l, Options{NodeAgentkernel: ak, NodeDataDir: nodeDataDir(t, ak)})
	type series struct{ running, first, execs []time.Duration }
	var plain, cold, pooled series
	roundTrips := func(s *series, exec func() (int, error)) {
		for j := 0; j < 5; j++ {
			st := time.Now()
			if code, err := exec(); err != nil || code != 0 {
				t.Fatal(code, err)
			}
			s.execs = append(s.execs, time.Since(st))
		}
	}
	// A series' jobs are stopped only after it, and their tasks waited
	// for: a teardown on the node (the previous sandbox's) never runs
	// during a measured start.
	settle := func(names []string) {
		for _, name := range names {
			id, _, _, err := b.target(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			_, _, _ = b.client.Jobs().Deregister(id, false, nil)
			for {
				if a, err := b.runningAllocOf(ctx, id); err != nil || a == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err := b.Remove(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
	}
	untilAnswers := func(exec func() (int, error)) {
		for {
			code, err := exec()
			if err == nil && code == 0 {
				return
			}
			if ctx.Err() != nil {
				t.Fatal(code, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Plain jobs: raw_exec running sleep.
	var names []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("plain-%d", i)
		cleanupJob(t, b, name)
		job := buildJob(b.jobOptions(), &Request{Name: name}, time.Now())
		job.TaskGroups[0].Tasks[0].Config = map[string]any{"command": "/bin/sleep", "args": []string{"600"}}
		start := time.Now()
		if _, _, err := b.client.Jobs().Register(job, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Wait(ctx, name); err != nil {
			t.Fatal(err)
		}
		plain.running = append(plain.running, time.Since(start))
		exec := func() (int, error) {
			a, _, err := b.runningAlloc(ctx, name)
			if err != nil {
				return 0, err
			}
			return b.execIn(ctx, a, name, []string{"true"}, false, nil, nil, nil)
		}
		untilAnswers(exec)
		plain.first = append(plain.first, time.Since(start))
		roundTrips(&plain, exec)
		names = append(names, name)
	}
	for _, name := range names {
		_, _, _ = b.client.Jobs().Deregister(JobID(name), true, nil)
	}
	time.Sleep(2 * time.Second)
	sandboxes := func(s *series, prefix string, create func(name string) error) {
		var names []string
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("%s-%d", prefix, i)
			cleanupJob(t, b, name)
			start := time.Now()
			if err := create(name); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Wait(ctx, name); err != nil {
				t.Fatal(err)
			}
			s.running = append(s.running, time.Since(start))
			exec := func() (int, error) { return b.Exec(ctx, name, []string{"true"}, nil, nil, nil) }
			untilAnswers(exec)
			s.first = append(s.first, time.Since(start))
			roundTrips(s, exec)
			names = append(names, name)
		}
		settle(names)
	}
	sandboxes(&cold, "cold", func(name string) error {
		_, err := b.Create(ctx, &Request{Name: name, Image: "host", Network: NetworkNone})
		return err
	})
	// Pooled: the pool is filled and answering before the first take
	// (that is its point); the takes run one after the other, nothing
	// refilling meanwhile.
	p := &Pool{Name: "bench", Request: Request{Image: "host", Network: NetworkNone}, Size: n}
	t.Cleanup(func() { _ = b.Drain(context.Background(), p) })
	if _, err := b.Fill(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitPool(ctx, p, n, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	sandboxes(&pooled, "pooled", func(name string) error {
		_, adopted, err := b.CreateFromPool(ctx, p, &Request{Name: name, Image: "host", Network: NetworkNone})
		if err == nil && !adopted {
			err = fmt.Errorf("%s: not taken from the pool", name)
		}
		return err
	})
	t.Logf("shared 2-core machine, Nomad %s dev agent, n=%d sequential, medians:", "v1.11.2", n)
	for _, r := range []struct {
		what string
		s    series
	}{{"plain raw_exec sleep job", plain}, {"sandbox, cold (job of its own)", cold}, {"sandbox, pooled (job taken)", pooled}} {
		t.Logf("%-32s running %8v  first exec %8v (%.2f/s)  exec round trip %v", r.what,
			median(r.s.running).Round(time.Millisecond), median(r.s.first).Round(time.Millisecond),
			1/median(r.s.first).Seconds(), median(r.s.execs).Round(time.Millisecond))
	}
	t.Logf("pooled vs cold to first exec: %.1f× faster", median(cold.first).Seconds()/median(pooled.first).Seconds())
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

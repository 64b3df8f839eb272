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

// TestCreateRate measures, on a real dev agent: sandboxes created and
// running per second (agentkernel driver: the node's agentkernel making
// a native sandbox of the host image), against a plain raw_exec job
// running sleep measured the same way (register, then wait for the task
// to run); and the exec round trip (`true` through the alloc exec API
// and `agentkernel exec`). A measurement, not a check: set
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b := newBackend(t, l, Options{NodeAgentkernel: ak, NodeDataDir: nodeDataDir(t, ak)})

	// Plain jobs: raw_exec running sleep, sequentially.
	var plain []time.Duration
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
		plain = append(plain, time.Since(start))
		_, _, _ = b.client.Jobs().Deregister(JobID(name), true, nil)
	}
	var cold, execs []time.Duration
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("cold-%d", i)
		cleanupJob(t, b, name)
		start := time.Now()
		if _, err := b.Create(ctx, &Request{Name: name, Image: "host", Network: NetworkNone}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Wait(ctx, name); err != nil {
			t.Fatal(err)
		}
		// Ready: a command runs in the sandbox.
		for {
			code, err := b.Exec(ctx, name, []string{"true"}, nil, nil, nil)
			if err == nil && code == 0 {
				break
			}
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		cold = append(cold, time.Since(start))
		for j := 0; j < 5; j++ {
			s := time.Now()
			if code, err := b.Exec(ctx, name, []string{"true"}, nil, nil, nil); err != nil || code != 0 {
				t.Fatal(code, err)
			}
			execs = append(execs, time.Since(s))
		}
		if err := b.Remove(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("shared 2-core machine, n=%d sequential:", n)
	t.Logf("plain raw_exec sleep job, register to running: median %v (%.2f/s)", median(plain), 1/median(plain).Seconds())
	t.Logf("sandbox (agentkernel driver), register to first exec: median %v (%.2f/s)", median(cold), 1/median(cold).Seconds())
	t.Logf("exec round trip (true): median %v", median(execs))
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

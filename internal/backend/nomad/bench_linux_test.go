//go:build linux

package nomad

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"
)

// BenchmarkNode times starts on a real dev agent (nomadlab's, one for
// all its sub-benchmarks), each measured the same way: from the first
// request until the task runs ("running"; a pooled sandbox's job
// already runs) and until a first command (true) has returned through
// the alloc exec API ("first-exec": for a sandbox the node's
// `agentkernel exec NAME -- true`, for the plain job true in its task).
// The plain job is the baseline: raw_exec running sleep, no sandbox.
// A sandbox is the agentkernel driver's: the node's agentkernel running
// a native sandbox of the host image, network none.
//
//	CGO_ENABLED=0 go test -p 1 ./internal/backend/nomad -run '^$' \
//	    -bench BenchmarkNode -benchtime 10x
//
// Sub-benchmarks:
//
//   - PlainJob, ColdSandbox (a job of its own), PooledSandbox (taking a
//     waiting job of a warm pool filled and answering beforehand,
//     outside the timer): each reports the median and the p90 of its
//     b.N starts to running and to the first exec, and starts/s, the
//     starts one after the other a second at the median to the first
//     exec. The jobs of a series stay until it ends and are then stopped
//     and their tasks waited for, outside the timer, so that no teardown
//     on the node runs during a measured start.
//   - Exec/PlainJob, Exec/ColdSandbox, Exec/PooledSandbox: the round
//     trip of true into a running one (exec-median-ms, exec-p90-ms).
//
// Go prints the mean of the timed part (ns/op) besides: for a start,
// request to first exec returned.
func BenchmarkNode(bb *testing.B) {
	l := startLab(bb)
	ak := buildAgentkernel(bb)
	b := newBackend(bb, l, Options{NodeAgentkernel: ak, NodeDataDir: nodeDataDir(bb, ak)})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	hostNone := Request{Image: "host", Network: NetworkNone}
	run := 0 // each call of a sub-benchmark's function names its jobs apart
	series := func(bb *testing.B, prefix string, plain bool, start func(name string) error) {
		run++
		m := medians{}
		var names []string
		defer func() { settle(ctx, bb, b, names) }()
		bb.ResetTimer()
		for i := 0; i < bb.N; i++ {
			name := fmt.Sprintf("%s-%d-%d", prefix, run, i)
			cleanupJob(bb, b, name)
			names = append(names, name)
			t0 := time.Now()
			if err := start(name); err != nil {
				bb.Fatal(err)
			}
			if _, err := b.Wait(ctx, name); err != nil {
				bb.Fatal(err)
			}
			m["running"] = append(m["running"], time.Since(t0))
			untilAnswers(ctx, bb, func() (int, error) { return benchExec(ctx, b, name, plain) })
			m["first-exec"] = append(m["first-exec"], time.Since(t0))
		}
		bb.StopTimer()
		m.report(bb)
		bb.ReportMetric(1/median(m["first-exec"]).Seconds(), "starts/s")
	}

	bb.Run("PlainJob", func(bb *testing.B) {
		series(bb, "plain", true, func(name string) error { return registerPlain(ctx, b, name) })
	})
	bb.Run("ColdSandbox", func(bb *testing.B) {
		series(bb, "cold", false, func(name string) error {
			r := hostNone
			r.Name = name
			_, err := b.Create(ctx, &r)
			return err
		})
	})
	bb.Run("PooledSandbox", func(bb *testing.B) {
		// The pool is filled and answering before the first take (that
		// is its point); the takes run one after the other, nothing
		// refilling meanwhile.
		p := &Pool{Name: fmt.Sprintf("bench-%d", run+1), Request: hostNone, Size: bb.N}
		defer func() { _ = b.Drain(context.Background(), p) }()
		if _, err := b.Fill(ctx, p); err != nil {
			bb.Fatal(err)
		}
		if err := b.WaitPool(ctx, p, bb.N, 10*time.Minute); err != nil {
			bb.Fatal(err)
		}
		series(bb, "pooled", false, func(name string) error {
			r := hostNone
			r.Name = name
			_, adopted, err := b.CreateFromPool(ctx, p, &r)
			if err == nil && !adopted {
				err = fmt.Errorf("%s: not taken from the pool", name)
			}
			return err
		})
	})

	bb.Run("Exec", func(bb *testing.B) {
		// One running target of each kind for every call below.
		var names []string
		defer func() { settle(ctx, bb, b, names) }()
		ready := func(name string, plain bool, start func() error) {
			cleanupJob(bb, b, name)
			names = append(names, name)
			if err := start(); err != nil {
				bb.Fatal(err)
			}
			if _, err := b.Wait(ctx, name); err != nil {
				bb.Fatal(err)
			}
			untilAnswers(ctx, bb, func() (int, error) { return benchExec(ctx, b, name, plain) })
		}
		ready("exec-plain", true, func() error { return registerPlain(ctx, b, "exec-plain") })
		ready("exec-cold", false, func() error {
			r := hostNone
			r.Name = "exec-cold"
			_, err := b.Create(ctx, &r)
			return err
		})
		p := &Pool{Name: "bench-exec", Request: hostNone, Size: 1}
		defer func() { _ = b.Drain(context.Background(), p) }()
		if _, err := b.Fill(ctx, p); err != nil {
			bb.Fatal(err)
		}
		if err := b.WaitPool(ctx, p, 1, 5*time.Minute); err != nil {
			bb.Fatal(err)
		}
		ready("exec-pooled", false, func() error {
			r := hostNone
			r.Name = "exec-pooled"
			_, adopted, err := b.CreateFromPool(ctx, p, &r)
			if err == nil && !adopted {
				err = fmt.Errorf("exec-pooled: not taken from the pool")
			}
			return err
		})
		for _, c := range []struct {
			sub, name string
			plain     bool
		}{{"PlainJob", "exec-plain", true}, {"ColdSandbox", "exec-cold", false}, {"PooledSandbox", "exec-pooled", false}} {
			bb.Run(c.sub, func(bb *testing.B) {
				m := medians{}
				bb.ResetTimer()
				for i := 0; i < bb.N; i++ {
					t0 := time.Now()
					if code, err := benchExec(ctx, b, c.name, c.plain); err != nil || code != 0 {
						bb.Fatalf("exec true: exit %d, %v", code, err)
					}
					m["exec"] = append(m["exec"], time.Since(t0))
				}
				bb.StopTimer()
				m.report(bb)
			})
		}
	})
}

// registerPlain registers the baseline: name's job as a sandbox's would
// be, its task raw_exec running sleep instead of the node's agentkernel.
func registerPlain(ctx context.Context, b *Backend, name string) error {
	job := buildJob(b.jobOptions(), &Request{Name: name}, time.Now())
	job.TaskGroups[0].Tasks[0].Config = map[string]any{"command": "/bin/sleep", "args": []string{"600"}}
	_, _, err := b.client.Jobs().Register(job, b.w(ctx))
	return err
}

// benchExec runs true in name's sandbox through the node's agentkernel
// (Exec), or for a plain job (no sandbox to enter) in its task itself.
func benchExec(ctx context.Context, b *Backend, name string, plain bool) (int, error) {
	if plain {
		a, _, err := b.runningAlloc(ctx, name)
		if err != nil {
			return 0, err
		}
		return b.execIn(ctx, a, name, []string{"true"}, false, nil, nil, nil)
	}
	return b.Exec(ctx, name, []string{"true"}, nil, nil, nil)
}

// untilAnswers repeats exec until it returns 0 (a task that runs may not
// answer yet).
func untilAnswers(ctx context.Context, bb *testing.B, exec func() (int, error)) {
	bb.Helper()
	for {
		code, err := exec()
		if err == nil && code == 0 {
			return
		}
		if ctx.Err() != nil {
			bb.Fatalf("no answer: exit %d, %v", code, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settle stops the named sandboxes' jobs, waits until their tasks have
// ended and removes them, outside the timer: the next measured start
// finds no teardown running on the node.
func settle(ctx context.Context, bb *testing.B, b *Backend, names []string) {
	bb.Helper()
	bb.StopTimer()
	for _, name := range names {
		id, _, _, err := b.target(ctx, name)
		if err != nil {
			bb.Error(err)
			continue
		}
		_, _, _ = b.client.Jobs().Deregister(id, false, b.w(ctx))
		for {
			if a, err := b.runningAllocOf(ctx, id); err != nil || a == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := b.Remove(ctx, name); err != nil {
			bb.Error(err)
		}
	}
}

// medians records durations and reports their median and p90, as the
// kubernetes backend's node benchmarks do.
type medians map[string][]time.Duration

func (m medians) report(b *testing.B) {
	for k, v := range m {
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		b.ReportMetric(float64(v[len(v)/2].Microseconds())/1000, k+"-median-ms")
		b.ReportMetric(float64(v[len(v)*9/10].Microseconds())/1000, k+"-p90-ms")
	}
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

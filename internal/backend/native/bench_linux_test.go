package native

import (
	"context"
	"errors"
	"io"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// BenchmarkRunTrue is one sandboxed /bin/true with every fence on,
// measured in-process (without the CLI's own start-up).
func BenchmarkRunTrue(b *testing.B) {
	bk := New(Options{DataDir: b.TempDir()})
	spec := newSpec("/bin/true")
	for i := 0; i < b.N; i++ {
		res, err := bk.Run(context.Background(), spec, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard})
		if err != nil || res.ExitCode != 0 {
			b.Fatal(err, res)
		}
	}
}

func BenchmarkRunTrueBare(b *testing.B) {
	bk := New(Options{DataDir: b.TempDir()})
	spec := newSpec("/bin/true")
	spec.Security.Landlock = false
	spec.Security.Seccomp = "unconfined"
	for i := 0; i < b.N; i++ {
		res, err := bk.Run(context.Background(), spec, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard})
		if err != nil || res.ExitCode != 0 {
			b.Fatal(err, res)
		}
	}
}

func BenchmarkRunTrueNoLandlock(b *testing.B) {
	bk := New(Options{DataDir: b.TempDir()})
	spec := newSpec("/bin/true")
	spec.Security.Landlock = false
	for i := 0; i < b.N; i++ {
		res, err := bk.Run(context.Background(), spec, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard})
		if err != nil || res.ExitCode != 0 {
			b.Fatal(err, res)
		}
	}
}

// BenchmarkCompileSeccomp is the per-run cost of building docker's
// default filter in the exec stage.
func BenchmarkCompileSeccomp(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := compileSeccomp("default", dockerCaps, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadSeccomp is what the exec stage's stub pays to install
// docker's default filter: each iteration loads it on a fresh thread
// (a filter cannot be removed), which then ends. ns/op includes making
// and ending that thread; load-µs is the median of the seccomp(2) call
// alone.
func BenchmarkLoadSeccomp(b *testing.B) {
	prog, err := compileSeccomp("default", dockerCaps, false)
	if err != nil {
		b.Fatal(err)
	}
	type result struct {
		d   time.Duration
		err error
	}
	results := make(chan result)
	loads := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
				results <- result{err: err}
				return
			}
			start := time.Now()
			err := loadSeccomp(prog)
			results <- result{time.Since(start), err}
		}()
		r := <-results
		if r.err != nil {
			b.Fatal(r.err)
		}
		loads = append(loads, r.d)
	}
	slices.Sort(loads)
	b.ReportMetric(float64(loads[len(loads)/2].Nanoseconds())/1e3, "load-µs")
}

// BenchmarkCgroupNewDestroy is one run's cgroup: made with the moderate
// profile's three limits, then removed.
func BenchmarkCgroupNewDestroy(b *testing.B) {
	testenv.RequireRoot(b)
	r := sandbox.Resources{MemoryMB: 512, PIDs: 256, CPUPercent: 100}
	for i := 0; i < b.N; i++ {
		cg, err := newCgroup(cgroupName("bench"+randomID(), ""), r, false, false)
		if errors.Is(err, errNoCgroups) {
			testenv.Missing(b, "no cgroups here: %v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := cg.destroy(); err != nil {
			b.Fatal(err)
		}
	}
}

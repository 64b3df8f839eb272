package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// prepareSeq numbers the prepared sandboxes of these tests, whose ids
// start with "preptest" (cgroups of other packages' sandboxes may exist
// at the same time).
var prepareSeq atomic.Int64

func prepare(t testing.TB, b *Backend, spec *sandbox.Spec) sandbox.Prepared {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := *spec
	c.ID = fmt.Sprintf("preptest%d-%d", os.Getpid(), prepareSeq.Add(1))
	p, err := b.Prepare(ctx, &c)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	return p
}

// TestPrepared: a prepared sandbox runs the command it is given later with
// the same results as Run (output, stdin, exit codes, exec errors, the
// isolation of the spec), and leaves nothing behind, whether run or
// discarded. Both ways of building it: on a thread of the caller, and
// in a re-executed init.
func TestPrepared(t *testing.T) {
	requireRoot(t)
	t.Run("thread", testPrepared)
	t.Run("reexec", func(t *testing.T) {
		t.Setenv("AGENTKERNEL_REEXEC_INIT", "1")
		testPrepared(t)
	})
}

func testPrepared(t *testing.T) {
	b := New(Options{DataDir: t.TempDir()})
	defer b.Drain()
	spec := newSpec()
	spec.Resources.MemoryMB = 64
	spec.Resources.PIDs = 64

	run := func(args []string, stdin io.Reader) (sandbox.Result, string, string, error) {
		p := prepare(t, b, spec)
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := p.Run(ctx, args, sandbox.Stdio{Stdin: stdin, Stdout: &out, Stderr: &errb}, nil)
		p.Close() // after Run: nothing to do
		return res, out.String(), errb.String(), err
	}
	res, out, errs, err := run([]string{"sh", "-c", "tr a-z A-Z; echo err >&2; hostname; id -u; exit 42"}, strings.NewReader("hello\n"))
	if err != nil || res.ExitCode != 42 || out != "HELLO\nsbx\n0\n" || errs != "err\n" {
		t.Fatalf("run: %v %+v stdout %q stderr %q", err, res, out, errs)
	}
	// Seccomp, capabilities and the pid limit of the spec hold.
	res, out, errs, err = run([]string{"sh", "-c", "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status; for i in $(seq 80); do sleep 5 & done; kill $(jobs -p) 2>/dev/null"}, nil)
	if err != nil || !strings.Contains(out, "Seccomp:\t2") || !strings.Contains(out, "NoNewPrivs:\t1") || !strings.Contains(errs, "fork") {
		t.Fatalf("isolation: %v %+v stdout %q stderr %q", err, res, out, errs)
	}
	if _, _, _, err = run([]string{"no-such-command"}, nil); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("missing command: %v", err)
	}
	res, _, _, err = run([]string{"sh", "-c", "kill -9 $$"}, nil)
	if err != nil || res.ExitCode != 137 || res.Signal != 9 {
		t.Fatalf("killed: %v %+v", err, res)
	}
	// Background processes die with the command, as in Run.
	start := time.Now()
	res, _, _, err = run([]string{"sh", "-c", "sleep 100 & exit 0"}, nil)
	if err != nil || res.ExitCode != 0 || time.Since(start) > 10*time.Second {
		t.Fatalf("background: %v %+v after %v", err, res, time.Since(start))
	}

	// Files are handed to the command as they are.
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	in, _ := os.Open("/etc/hostname")
	want, _ := os.ReadFile("/etc/hostname")
	p0 := prepare(t, b, spec)
	res, err = p0.Run(context.Background(), []string{"sh", "-c", "cat; echo to-file; echo err >&2"}, sandbox.Stdio{Stdin: in, Stdout: f, Stderr: f}, nil)
	in.Close()
	got, _ := os.ReadFile(f.Name())
	if err != nil || res.ExitCode != 0 || string(got) != string(want)+"to-file\nerr\n" {
		t.Fatalf("files: %v %+v %q", err, res, got)
	}

	// A timeout counts from Run, not from Prepare.
	ts := newSpec()
	ts.Resources.Timeout = 1500 * time.Millisecond
	p := prepare(t, b, ts)
	time.Sleep(1600 * time.Millisecond)
	res, err = p.Run(context.Background(), []string{"sh", "-c", "sleep 0.1; echo ok"}, sandbox.Stdio{}, nil)
	if err != nil || res.TimedOut || res.ExitCode != 0 {
		t.Fatalf("timeout from Prepare: %v %+v", err, res)
	}
	p = prepare(t, b, ts)
	res, err = p.Run(context.Background(), []string{"sleep", "10"}, sandbox.Stdio{}, nil)
	if err != nil || !res.TimedOut {
		t.Fatalf("timeout: %v %+v", err, res)
	}

	// Signals forwarded.
	p = prepare(t, b, newSpec())
	sigs := make(chan os.Signal, 1)
	go func() { time.Sleep(200 * time.Millisecond); sigs <- syscall.SIGTERM }()
	res, err = p.Run(context.Background(), []string{"sleep", "10"}, sandbox.Stdio{}, sigs)
	if err != nil || res.ExitCode != 143 {
		t.Fatalf("SIGTERM: %v %+v", err, res)
	}

	// A second Run is refused; discarded ones leave nothing.
	if _, err := p.Run(context.Background(), []string{"true"}, sandbox.Stdio{}, nil); err == nil {
		t.Fatal("second Run accepted")
	}
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Go(func() { prepare(t, b, spec).Close() })
	}
	wg.Wait()
	if left := waitGone(sandboxProcs, 5*time.Second); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
	ours := func() []string {
		var out []string
		for _, d := range agentkernelCgroups() {
			if strings.Contains(filepath.Base(d), fmt.Sprintf("preptest%d-", os.Getpid())) {
				out = append(out, d)
			}
		}
		return out
	}
	if left := waitGone(ours, 5*time.Second); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
}

// TestPrepareFails: a spec that cannot be built fails at Prepare.
func TestPrepareFails(t *testing.T) {
	requireRoot(t)
	b := New(Options{DataDir: t.TempDir()})
	spec := newSpec()
	spec.Rootfs.Layers = []string{"/nonexistent-layer-dir"}
	if p, err := b.Prepare(context.Background(), spec); err == nil {
		p.Close()
		t.Fatal("Prepare of a missing layer succeeded")
	}
	if left := waitGone(sandboxProcs, 5*time.Second); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
}

// BenchmarkPreparedRunTrue is the request path of a warm pool: /bin/true
// in a sandbox prepared beforehand (the preparation is not timed).
func BenchmarkPreparedRunTrue(b *testing.B) {
	bk := New(Options{DataDir: b.TempDir()})
	defer bk.Drain()
	spec := newSpec()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		p, err := bk.Prepare(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		res, err := p.Run(context.Background(), []string{"/bin/true"}, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard}, nil)
		if err != nil || res.ExitCode != 0 {
			b.Fatal(err, res)
		}
	}
}

// BenchmarkPrepare is what refilling a pool costs per sandbox.
func BenchmarkPrepare(b *testing.B) {
	bk := New(Options{DataDir: b.TempDir()})
	defer bk.Drain()
	spec := newSpec()
	for i := 0; i < b.N; i++ {
		p, err := bk.Prepare(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		p.Close()
		b.StartTimer()
	}
}

// BenchmarkPreparedRunTrueRefilling is BenchmarkPreparedRunTrue while
// another sandbox is prepared for each one run, as a pool's refill does.
func BenchmarkPreparedRunTrueRefilling(b *testing.B) {
	bk := New(Options{DataDir: b.TempDir()})
	defer bk.Drain()
	spec := newSpec()
	ready := make(chan sandbox.Prepared, 4)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for {
			p, err := bk.Prepare(context.Background(), spec)
			if err != nil {
				panic(err)
			}
			select {
			case ready <- p:
			case <-stop:
				p.Close()
				return
			}
		}
	})
	defer close(stop)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		p := <-ready
		b.StartTimer()
		res, err := p.Run(context.Background(), []string{"/bin/true"}, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard}, nil)
		if err != nil || res.ExitCode != 0 {
			b.Fatal(err, res)
		}
	}
}

// TestSeccompCachePrune: compiling a filter into the cache removes what
// other builds of the binary cached and temporary files a killed run
// left, and keeps a temporary file another run may be writing now.
func TestSeccompCachePrune(t *testing.T) {
	dir := t.TempDir()
	b := New(Options{DataDir: dir})
	cdir := filepath.Join(dir, "cache", "seccomp")
	if err := os.MkdirAll(cdir, 0o700); err != nil {
		t.Fatal(err)
	}
	id, err := exeIdentity()
	if err != nil {
		t.Fatal(err)
	}
	pfx := exePrefix(id)
	other := filepath.Join(cdir, "00000000-0123.bpf")
	oldTmp := filepath.Join(cdir, pfx+"aaaa.bpf.1")
	newTmp := filepath.Join(cdir, pfx+"bbbb.bpf.2")
	for _, f := range []string{other, oldTmp, newTmp} {
		if err := os.WriteFile(f, make([]byte, 8), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	_ = os.Chtimes(oldTmp, old, old)
	r := &runState{b: b, spec: newSpec()}
	m := r.filterMessage(&execConfig{Seccomp: "default", Caps: dockerCaps})
	if len(m) < 9 || m[0] != 'F' {
		t.Fatalf("filter message %q", m[:min(len(m), 40)])
	}
	for f, want := range map[string]bool{other: false, oldTmp: false, newTmp: true} {
		if _, err := os.Stat(f); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", filepath.Base(f), err == nil, want)
		}
	}
	cached, _ := filepath.Glob(filepath.Join(cdir, pfx+"*.bpf"))
	if len(cached) != 1 {
		t.Errorf("cached programs: %v", cached)
	}
	if m2 := r.filterMessage(&execConfig{Seccomp: "default", Caps: dockerCaps}); string(m2) != string(m) {
		t.Errorf("the cached program differs from the compiled one")
	}
}

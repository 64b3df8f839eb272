package api

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/image"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

func TestPoolKey(t *testing.T) {
	base := func() *sandbox.Spec {
		return &sandbox.Spec{ID: "a", Image: "host", ImageRule: "flag", Profile: "moderate", Args: []string{"true"},
			Env: []string{"A=1"}, Workdir: "/workspace", Mounts: []sandbox.Mount{{Kind: sandbox.MountBind, Source: "/p", Dest: "/workspace"}}}
	}
	k0, _ := poolKey(base())
	same := base()
	same.ID, same.Args, same.ImageRule = "b", []string{"sh", "-c", "echo"}, "command"
	if k, _ := poolKey(same); k != k0 {
		t.Errorf("the command, ID or image rule changed the key")
	}
	for name, change := range map[string]func(*sandbox.Spec){
		"image":   func(s *sandbox.Spec) { s.Image = "python:3" },
		"profile": func(s *sandbox.Spec) { s.Profile = "restrictive" },
		"env":     func(s *sandbox.Spec) { s.Env = []string{"A=2"} },
		"workdir": func(s *sandbox.Spec) { s.Workdir = "/" },
		"mounts":  func(s *sandbox.Spec) { s.Mounts[0].Source = "/q" },
		"network": func(s *sandbox.Spec) { s.Network.Mode = sandbox.NetworkFull },
	} {
		s := base()
		change(s)
		if k, _ := poolKey(s); k == k0 {
			t.Errorf("%s: same key", name)
		}
	}
	if !poolable(base()) {
		t.Errorf("a plain run is not poolable")
	}
	to := base()
	to.Resources.Timeout = time.Second
	if !poolable(to) {
		t.Errorf("a run with a timeout is not poolable")
	}
	if k, _ := poolKey(to); k == k0 {
		t.Errorf("timeout: same key")
	}
	for name, change := range map[string]func(*sandbox.Spec){
		"tty":       func(s *sandbox.Spec) { s.TTY = true },
		"keep":      func(s *sandbox.Spec) { s.Keep = true },
		"no args":   func(s *sandbox.Spec) { s.Args = nil },
		"huge argv": func(s *sandbox.Spec) { s.Args = []string{strings.Repeat("x", 40<<10)} },
	} {
		s := base()
		change(s)
		if poolable(s) {
			t.Errorf("%s: poolable", name)
		}
	}
}

// standIn is a backend whose prepared sandboxes are plain counters. The
// pool's bookkeeping (eviction, pinning, discarding) is what these tests
// check; real prepared sandboxes go through the same pool in the e2e
// tests (TestAPIPool, TestDaemon), which need root.
type standIn struct {
	live atomic.Int64
	// gate, when set, holds every preparation until it is closed.
	gate chan struct{}
}

func (b *standIn) Name() string { return "standin" }
func (b *standIn) Run(context.Context, *sandbox.Spec, sandbox.Stdio) (sandbox.Result, error) {
	return sandbox.Result{}, nil
}
func (b *standIn) Prepare(context.Context, *sandbox.Spec) (sandbox.Prepared, error) {
	if b.gate != nil {
		<-b.gate
	}
	b.live.Add(1)
	return &standInSandbox{b: b}, nil
}

type standInSandbox struct {
	b    *standIn
	once sync.Once
}

func (s *standInSandbox) Run(context.Context, []string, sandbox.Stdio, <-chan os.Signal) (sandbox.Result, error) {
	s.Close()
	// As if the command had asked for a name its policy refuses, twice.
	return sandbox.Result{NetworkDenials: []sandbox.NetworkDenial{{Kind: "dns", Name: "refused.example", Reason: "not allowed", Count: 2}}}, nil
}
func (s *standInSandbox) Warnings() []string { return nil }

func (s *standInSandbox) Close() { s.once.Do(func() { s.b.live.Add(-1) }) }

func TestPoolEviction(t *testing.T) {
	oldIdle, oldCheck := poolIdle, idleCheck
	poolIdle, idleCheck = 100*time.Millisecond, 10*time.Millisecond
	defer func() { poolIdle, idleCheck = oldIdle, oldCheck }()
	b := &standIn{}
	m := sandbox.NewManager(sandbox.ManagerOptions{Backends: []sandbox.Backend{b}, Default: "standin"})
	p := newPools(m, PoolOptions{MinWarm: 1, MaxWarm: 2}, func(string, ...any) {})
	spec := func(i int) *sandbox.Spec {
		return &sandbox.Spec{Args: []string{"true"}, Env: []string{"K=" + strconv.Itoa(i)}, Rootfs: image.Rootfs{Host: true}}
	}
	ready := func() int { return readyIn(p) }

	// An idle pool goes, and its sandboxes with it; a pinned one stays.
	if sb, why, _ := p.take(spec(0)); sb != nil || why != "miss" {
		t.Fatalf("first take: %v %s", sb, why)
	}
	if err := p.prewarm(spec(1), 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three warm sandboxes", func() bool { return ready() == 3 }) // 2 (grown by the miss) + 1
	waitFor(t, "the idle pool's eviction", func() bool { return ready() == 1 && b.live.Load() == 1 })
	time.Sleep(3 * poolIdle)
	if ready() != 1 {
		t.Errorf("the pinned pool was evicted")
	}

	// Beyond maxPools the least recently used pool makes room.
	for i := 2; i < 2+maxPools; i++ {
		p.take(spec(i))
	}
	p.mu.Lock()
	n := len(p.byKey)
	k2, _ := poolKey(spec(2))
	_, has2 := p.byKey[k2]
	p.mu.Unlock()
	if n != maxPools || has2 {
		t.Errorf("%d pools (want %d), oldest still there: %v", n, maxPools, has2)
	}
	p.close()
	if l := b.live.Load(); l != 0 {
		t.Errorf("%d prepared sandboxes left after close", l)
	}
}

// TestPoolShrinks: a pool grown by misses steps back down to min_warm
// once misses stop, discarding the sandboxes it no longer needs; a
// prewarm count is a floor it keeps. (Stand-in backend, as above.)
func TestPoolShrinks(t *testing.T) {
	oldIdle, oldCheck := poolIdle, idleCheck
	poolIdle, idleCheck = time.Hour, 5*time.Millisecond
	defer func() { poolIdle, idleCheck = oldIdle, oldCheck }()
	// Preparations wait for the gate, so both takes below miss (a
	// preparation finished between them would make the second a hit).
	b := &standIn{gate: make(chan struct{})}
	m := sandbox.NewManager(sandbox.ManagerOptions{Backends: []sandbox.Backend{b}, Default: "standin"})
	p := newPools(m, PoolOptions{MinWarm: 1, MaxWarm: 3}, func(string, ...any) {})
	defer p.close()
	// No shrinking until the pool has grown: the test sees the grown
	// pool however slowly the machine runs.
	setShrink := func(d time.Duration) {
		p.mu.Lock()
		p.shrinkAfter = d
		p.mu.Unlock()
	}
	setShrink(time.Hour)
	spec := &sandbox.Spec{Args: []string{"true"}, Rootfs: image.Rootfs{Host: true}}
	ready := func() int { return readyIn(p) }
	// Two misses in a row: the target goes 1 → 3.
	for i := 0; i < 2; i++ {
		if sb, why, _ := p.take(spec); sb != nil || why != "miss" {
			t.Fatalf("take %d: %v %s", i, sb, why)
		}
	}
	close(b.gate)
	waitFor(t, "the pool to grow to 3", func() bool { return ready() == 3 })
	setShrink(30 * time.Millisecond)
	waitFor(t, "the pool to shrink back to min_warm", func() bool { return ready() == 1 && b.live.Load() == 1 })
	// A prewarm count is a floor.
	if err := p.prewarm(spec, 2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the prewarmed 2", func() bool { return ready() == 2 })
	time.Sleep(300 * time.Millisecond)
	if n := ready(); n != 2 {
		t.Errorf("a prewarmed pool shrank to %d", n)
	}
}

// readyIn counts the ready sandboxes of every pool.
func readyIn(p *pools) int {
	n := 0
	for _, s := range p.sizes() {
		n += s.ready
	}
	return n
}

// waitFor polls f until it holds, failing the test after 5 s.
func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

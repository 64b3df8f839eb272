package sandbox

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

// barrierConns is a Connector and HostStats whose sandboxes each report
// their own figures, and whose Usage and Host calls each wait until
// every one of them has begun: they return only when the Manager makes
// them all at once (a sequential Stats times out, gives up and fails).
type barrierConns struct {
	cpu   map[string][]float64 // the CPU seconds each reading reports
	calls int                  // the calls the barrier waits for
	mu    sync.Mutex
	seen  map[string]int
	in    int
	all   chan struct{}
}

func (b *barrierConns) arrive() error {
	b.mu.Lock()
	b.in++
	if b.in == b.calls {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
		return nil
	case <-time.After(5 * time.Second):
		return errors.New("called one at a time")
	}
}

type barrierConn struct {
	Conn
	b    *barrierConns
	name string
}

func (c barrierConn) Usage(context.Context) (Usage, error) {
	c.b.mu.Lock()
	k := c.b.seen[c.name]
	c.b.seen[c.name]++
	c.b.mu.Unlock()
	if k == 0 {
		if err := c.b.arrive(); err != nil {
			return Usage{}, err
		}
	}
	return Usage{Name: "wrong", CPUSeconds: c.b.cpu[c.name][min(k, 1)], MemoryBytes: int64(len(c.name)) << 20}, nil
}

func (c barrierConn) Close() error { return nil }

func (b *barrierConns) Connect(_ context.Context, name string) (Conn, error) {
	return barrierConn{b: b, name: name}, nil
}

func (b *barrierConns) DiskUsage(_ context.Context, name string) (int64, error) {
	return int64(len(name)), nil
}

func (b *barrierConns) Host(context.Context) (HostUsage, error) {
	if err := b.arrive(); err != nil {
		return HostUsage{}, err
	}
	return HostUsage{CPUs: 2}, nil
}

// TestStatsSamplesTogether: Stats of several running sandboxes reads
// them and the host at the same time (one sample period for all), gives
// each sandbox its own figures under its own name in the order asked
// (a name given twice sampled once, shown twice), its CPU percent over
// its own readings; an unknown name among them is
// the one its error names.
func TestStatsSamplesTogether(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	b := &barrierConns{cpu: map[string][]float64{"a": {1, 1.2}, "bb": {5, 5}, "ccc": {0, 0.1}}, seen: map[string]int{}, all: make(chan struct{})}
	b.calls = len(b.cpu) + 1 // and the host's
	for n := range b.cpu {
		if err := st.Create(ctx, &Info{Name: n, Status: StatusRunning}, &Spec{}); err != nil {
			t.Fatal(err)
		}
	}
	m := NewManager(ManagerOptions{Store: st, Connector: b, HostStats: b})
	start := time.Now()
	us, host, err := m.Stats(ctx, 200*time.Millisecond, "ccc", "a", "bb", "a")
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("stats took %v", took)
	}
	if host.CPUs != 2 || host.Sandboxes != 4 || host.Running != 4 || len(us) != 4 {
		t.Errorf("host: %+v", host)
	}
	for i, want := range []struct {
		name string
		cpu  float64 // percent: (second - first) over the sample
	}{{"ccc", 50}, {"a", 100}, {"bb", 0}, {"a", 100}} {
		u := us[i]
		if u.Name != want.name || u.Status != StatusRunning || u.MemoryBytes != int64(len(want.name))<<20 || u.UpperBytes != int64(len(want.name)) ||
			math.Abs(u.CPUPercent-want.cpu) > 0.01 {
			t.Errorf("row %d: %+v, want %s", i, u, want.name)
		}
	}
	if b.seen["a"] != 2 {
		t.Errorf("a name given twice was asked %d times, want 2 (one sample)", b.seen["a"])
	}
	var ne *NameError
	if _, _, err := m.Stats(ctx, 0, "a", "nosuch", "bb"); !errors.Is(err, ErrSandboxNotFound) || !errors.As(err, &ne) || ne.Name != "nosuch" {
		t.Errorf("stats with an unknown name: %v", err)
	}
}

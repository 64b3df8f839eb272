package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/atomicfile"
)

// fakeFreezer counts Thaw calls.
type fakeFreezer struct{ thawed atomic.Int32 }

func (f *fakeFreezer) Freeze(string, string) (func() error, error) {
	return func() error { return nil }, nil
}

func (f *fakeFreezer) Thaw(id, _ string) error {
	if id != "sbid" {
		return errors.New("wrong id " + id)
	}
	f.thawed.Add(1)
	return nil
}

// TestGuardFreeze: the supervisor's guard leaves a freeze alone while
// its taker holds the freeze lock, and thaws the sandbox (and removes
// the record) once the taker is gone without thawing; a freeze its taker
// ended itself is not thawed again.
func TestGuardFreeze(t *testing.T) {
	dir := t.TempDir()
	fz := &fakeFreezer{}
	stop, err := guardFreeze(fz, "sbid", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	waitThawed := func(n int32) bool {
		for i := 0; i < 100; i++ {
			if fz.thawed.Load() == n {
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	}
	// A taker that finishes: withFrozen.
	if err := withFrozen(fz, "sbid", dir, func() error { time.Sleep(100 * time.Millisecond); return nil }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := fz.thawed.Load(); n != 0 {
		t.Errorf("a finished freeze was thawed again (%d)", n)
	}
	// A taker that dies: its lock held, the record written, then the
	// lock released with the record left.
	unlock, err := atomicfile.Lock(filepath.Join(dir, freezeLockFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, frozenFile), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := fz.thawed.Load(); n != 0 {
		t.Fatalf("thawed while the taker held the lock (%d)", n)
	}
	unlock()
	if !waitThawed(1) {
		t.Fatalf("not thawed after the taker died (%d)", fz.thawed.Load())
	}
	if _, err := os.Stat(filepath.Join(dir, frozenFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the record stayed: %v", err)
	}
}

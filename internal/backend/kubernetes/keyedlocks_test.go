package kubernetes

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestKeyedLocks: callers of one key go one at a time, callers of
// different keys do not wait for each other, and once every caller has
// unlocked no entry is left: a server that serves many sandboxes over
// its life does not keep a lock per name it ever saw.
func TestKeyedLocks(t *testing.T) {
	var k keyedLocks
	const keys, per = 50, 20
	var inside [keys]atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < keys; i++ {
		for j := 0; j < per; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				unlock := k.lock(fmt.Sprintf("sb-%d", i))
				if n := inside[i].Add(1); n != 1 {
					t.Errorf("key %d: %d holders at once", i, n)
				}
				inside[i].Add(-1)
				unlock()
			}()
		}
	}
	wg.Wait()
	if n := k.len(); n != 0 {
		t.Fatalf("%d entries left after every lock was released", n)
	}

	// A key held blocks only its own callers.
	unlockA := k.lock("a")
	done := make(chan struct{})
	go func() { k.lock("b")(); close(done) }()
	<-done
	got := make(chan struct{})
	go func() { k.lock("a")(); close(got) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-got:
		t.Fatal("a second holder of key a while the first held it")
	default:
	}
	if n := k.len(); n != 1 {
		t.Errorf("%d entries while one key is held, want 1", n)
	}
	unlockA()
	<-got
	if n := k.len(); n != 0 {
		t.Errorf("%d entries left, want 0", n)
	}
}

// TestSandboxesLocksDrain: Start/Stop/Remove's name locks and the
// detached-start locks leave no entry behind, over many names.
func TestSandboxesLocksDrain(t *testing.T) {
	s := &Sandboxes{}
	for i := 0; i < 1000; i++ {
		name := fmt.Sprintf("sb-%d", i)
		s.lock(name)()
		s.detaching.lock(name)()
	}
	if a, b := s.names.len(), s.detaching.len(); a != 0 || b != 0 {
		t.Fatalf("entries left: %d name locks, %d detached-start locks", a, b)
	}
}

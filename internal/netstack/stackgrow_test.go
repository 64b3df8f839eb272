package netstack

import (
	"runtime"
	"sync"
	"testing"
)

// TestGrowStack: goroutines that call GrowStack hold stacks of at least
// 16 KiB each (a new goroutine's is 2 KiB), so a connection's deep calls
// do not grow them again.
func TestGrowStack(t *testing.T) {
	const n = 200
	inUse := func() uint64 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.StackInuse
	}
	before := inUse()
	var started, release sync.WaitGroup
	started.Add(n)
	release.Add(1)
	var done sync.WaitGroup
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			GrowStack()
			started.Done()
			release.Wait()
		}()
	}
	started.Wait()
	grown := inUse() - before
	release.Done()
	done.Wait()
	if per := grown / n; per < 12<<10 {
		t.Errorf("stack in use per goroutine after GrowStack: %d bytes, want at least %d", per, 12<<10)
	}
}

// Package idletrim shrinks the resident memory of a long-lived agentkernel
// process while it has nothing to do: a persistent sandbox's supervisor
// and its init spend nearly all their life waiting for the next exec.
//
// A Go process's resident set is mostly pages of its own executable
// (text and read-only data, shared with every other agentkernel process
// through the page cache, but counted in full in each process's RSS)
// plus its heap. After a quiet period a Trimmer drops this process's
// page-table entries for the executable's read-only mappings (madvise
// MADV_DONTNEED). Nothing is lost: the pages stay in the page cache and
// the next instruction that needs one maps it again with a minor fault
// (the first request after a trim pays those).
//
// The heap is left alone: forcing a GC and returning free spans
// (debug.FreeOSMemory) was measured to leave more anonymous memory
// resident than it freed, because the first GC cycle allocates its own
// work buffers.
//
// Only mappings that cannot differ from the file are dropped: no write
// permission, and no anonymous (copy-on-write) page in them according to
// /proc/self/smaps. A position-independent build whose loader relocated
// and then write-protected data (RELRO) has such pages and keeps them.
//
// No library does this for Go programs; it is a page of code.
package idletrim

import (
	"sync"
	"time"
)

// Trimmer calls Trim once the process has been idle for a quiet period.
// Busy marks work in flight; the quiet period starts when the last work
// ends. The zero Trimmer is unusable; use New.
type Trimmer struct {
	quiet time.Duration
	trim  func() // Trim, or a test's stand-in

	mu     sync.Mutex
	busy   int
	timer  *time.Timer
	closed bool
}

// New returns a Trimmer that trims after quiet without work, counting
// from now.
func New(quiet time.Duration) *Trimmer {
	t := &Trimmer{quiet: quiet, trim: func() { _, _ = Trim() }}
	t.timer = time.AfterFunc(quiet, t.fire)
	return t
}

// Busy marks the start of some work; the returned function marks its
// end (call it exactly once).
func (t *Trimmer) Busy() (done func()) {
	if t == nil {
		return func() {}
	}
	t.mu.Lock()
	t.busy++
	t.timer.Stop()
	t.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			t.busy--
			if t.busy == 0 && !t.closed {
				t.timer.Reset(t.quiet)
			}
			t.mu.Unlock()
		})
	}
}

// Stop ends the Trimmer: no trim happens after it returns.
func (t *Trimmer) Stop() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.closed = true
	t.timer.Stop()
	t.mu.Unlock()
}

func (t *Trimmer) fire() {
	t.mu.Lock()
	idle := t.busy == 0 && !t.closed
	t.mu.Unlock()
	if idle {
		t.trim()
	}
}

package runcli

import (
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a strings.Builder safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// TestWarnOnce: after WarnOnce each distinct warning is printed once, also
// from concurrent jobs; before it, every call prints.
func TestWarnOnce(t *testing.T) {
	var out lockedBuffer
	a := &App{Stderr: &out}
	a.Warnf("same %d", 1)
	a.Warnf("same %d", 1)
	if got := strings.Count(out.b.String(), "same 1"); got != 2 {
		t.Fatalf("without WarnOnce: %d lines, want 2", got)
	}
	out.b.Reset()
	a.WarnOnce()
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.Warnf("config %s", "x")
		}()
	}
	wg.Wait()
	a.Warnf("other")
	if got := out.b.String(); strings.Count(got, "config x") != 1 || strings.Count(got, "other") != 1 {
		t.Fatalf("with WarnOnce:\n%s", got)
	}
}

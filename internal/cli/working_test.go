package cli

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
)

// lockedBuffer is a strings.Builder safe for working's goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestWorking: a quick operation says nothing; one that takes longer
// than workingAfter says what it is doing when it becomes long and how
// long it took when it ends (plain lines: stderr is no terminal); quiet
// says nothing.
func TestWorking(t *testing.T) {
	var quick lockedBuffer
	a := NewApp(runcli.App{Stderr: &quick})
	a.working("taking snapshot s of dev")()
	if quick.String() != "" {
		t.Errorf("a quick operation printed %q", quick.String())
	}

	var long lockedBuffer
	a = NewApp(runcli.App{Stderr: &long})
	end := a.working("taking snapshot s of dev")
	time.Sleep(workingAfter + 300*time.Millisecond)
	end()
	lines := strings.Split(strings.TrimSuffix(long.String(), "\n"), "\n")
	if len(lines) != 2 || lines[0] != "agentkernel: taking snapshot s of dev..." ||
		!strings.HasPrefix(lines[1], "agentkernel: taking snapshot s of dev: ended after 1.") {
		t.Errorf("a long operation printed %q", long.String())
	}

	var quiet lockedBuffer
	a = NewApp(runcli.App{Stderr: &quiet, Quiet: true})
	end = a.working("x")
	time.Sleep(workingAfter + 100*time.Millisecond)
	end()
	if quiet.String() != "" {
		t.Errorf("--quiet printed %q", quiet.String())
	}
}

package audit

import (
	"os"
	"strings"
	"sync"
	"testing"
)

func TestAppendReadFilter(t *testing.T) {
	l := New(t.TempDir())
	if es, err := l.Read(Filter{}); err != nil || len(es) != 0 {
		t.Fatalf("missing log: %v %v", es, err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			code := i
			name := "a"
			if i%2 == 1 {
				name = "b"
			}
			if err := l.Append(Entry{Sandbox: name, Action: ActionExec, Command: []string{"sh", "-c", strings.Repeat("x", 500)}, ExitCode: &code, Who: "t"}); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	// A writer killed mid-line leaves a fragment: skipped.
	f, _ := os.OpenFile(l.Path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"time":"2026-01-01T00:00:00Z","sandbox":"a","act`)
	f.Close()
	l.Append(Entry{Sandbox: "a", Action: ActionStop})
	all, err := l.Read(Filter{})
	if err != nil || len(all) != 21 || all[20].Action != ActionStop {
		t.Fatalf("read: %d entries, %v", len(all), err)
	}
	if es, _ := l.Read(Filter{Sandbox: "b"}); len(es) != 10 {
		t.Errorf("filter by sandbox: %d", len(es))
	}
	if es, _ := l.Read(Filter{Sandbox: "a", Last: 3}); len(es) != 3 || es[2].Action != ActionStop {
		t.Errorf("last 3 of a: %+v", es)
	}
}

func TestClip(t *testing.T) {
	got := clip([]string{"a", strings.Repeat("y", 3000), "b"})
	n := 0
	for _, s := range got {
		n += len(s)
	}
	if n > maxCommand+len("…") || got[len(got)-1] != "…" {
		t.Errorf("clip: %d bytes, %q", n, got[len(got)-1])
	}
}

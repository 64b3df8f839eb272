package audit

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzRead: whatever the log file holds (damaged lines, binary junk,
// entries of other versions), Read never panics, returns only entries with
// an action, and its filters are consistent: Last N is the tail of the
// unfiltered result, and a sandbox filter keeps exactly that sandbox's
// entries in order.
func FuzzRead(f *testing.F) {
	for _, s := range []string{
		"",
		`{"time":"2026-11-22T01:00:00Z","sandbox":"a","action":"create","duration_ms":1,"who":"uid=0 via cli"}` + "\n",
		`{"time":"2026-11-22T01:00:00Z","sandbox":"a","action":"exec","command":["true"],"exit_code":0,"duration_ms":1,"who":"x"}` + "\n" +
			`{"time":"2026-11-22T01:00:01Z","sandbox":"b","act` + `{"time":"2026-11-22T01:00:02Z","sandbox":"b","action":"stop","duration_ms":2,"who":"y"}` + "\n",
		"not json\n{}\n{\"action\":\"\"}\n",
		`{"time":"bad","action":"x"}` + "\n",
	} {
		f.Add([]byte(s), "a", 1)
	}
	f.Fuzz(func(t *testing.T, data []byte, sandbox string, last int) {
		dir := t.TempDir()
		l := New(dir)
		if err := os.WriteFile(filepath.Join(dir, "audit.jsonl"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		all, err := l.Read(Filter{})
		if err != nil {
			return // e.g. a line longer than the reader's limit: an error, not a panic
		}
		for _, e := range all {
			if e.Action == "" {
				t.Fatalf("entry without an action: %+v", e)
			}
		}
		if last < 0 || last > 1000 {
			last = 3
		}
		tail, err := l.Read(Filter{Last: last})
		if err != nil {
			t.Fatalf("Last %d failed where the full read did not: %v", last, err)
		}
		want := all
		if last > 0 && len(want) > last {
			want = want[len(want)-last:]
		}
		if !reflect.DeepEqual(tail, want) {
			t.Fatalf("Last %d: got %d entries, want the last %d of %d", last, len(tail), len(want), len(all))
		}
		mine, err := l.Read(Filter{Sandbox: sandbox})
		if err != nil {
			t.Fatal(err)
		}
		var wantMine []Entry
		for _, e := range all {
			if e.Sandbox == sandbox || sandbox == "" {
				wantMine = append(wantMine, e)
			}
		}
		if len(mine) != len(wantMine) || (len(mine) > 0 && !reflect.DeepEqual(mine, wantMine)) {
			t.Fatalf("sandbox filter %q: got %d entries, want %d", sandbox, len(mine), len(wantMine))
		}
	})
}

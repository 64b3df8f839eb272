//go:build linux

package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStatsNamesEachSandbox: 'stats A B' of two running sandboxes, one
// busy (64 MiB in its /tmp) and one idle, gives each its own figures
// under its own name, in the order named, in both binaries; an unknown
// name among known ones is the one the error names; several sandboxes
// take one sample period, not one each.
func TestStatsNamesEachSandbox(t *testing.T) {
	a, ref := newSandbox(t, "busy")
	a.must("sandbox", "create", "idle", "--image", ref, "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "idle") })
	for _, n := range []string{"idle2", "idle3"} {
		a.must("sandbox", "create", n, "--image", ref, "--start")
		t.Cleanup(func() { a.run("sandbox", "rm", "--force", n) })
	}
	a.must("exec", "busy", "--", "sh", "-c", "head -c 67108864 /dev/zero > /tmp/fill")
	full := filepath.Join(filepath.Dir(binary), "agentkernel-full")
	type row struct {
		Name        string `json:"name"`
		MemoryBytes int64  `json:"memory_bytes"`
	}
	stats := func(bin string, names ...string) ([]row, time.Duration) {
		t.Helper()
		a.bin = bin
		defer func() { a.bin = "" }()
		r := a.must(append([]string{"stats", "--json"}, names...)...)
		var out struct {
			Sandboxes []row `json:"sandboxes"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("stats %v: %v\n%s", names, err, r.stdout)
		}
		return out.Sandboxes, r.took
	}
	for _, bin := range []string{"", full} {
		for _, order := range [][]string{{"busy", "idle"}, {"idle", "busy"}} {
			rows, _ := stats(bin, order...)
			if len(rows) != 2 {
				t.Fatalf("%s stats %v: %+v", bin, order, rows)
			}
			by := map[string]row{}
			for i, r := range rows {
				if r.Name != order[i] {
					t.Errorf("%s stats %v: row %d is %q", bin, order, i, r.Name)
				}
				by[r.Name] = r
			}
			if b, i := by["busy"], by["idle"]; b.MemoryBytes < i.MemoryBytes+48<<20 {
				t.Errorf("%s stats %v: busy %+v, idle %+v", bin, order, b, i)
			}
		}
	}
	for _, args := range [][]string{{"stats", "busy", "nosuch"}, {"stats", "nosuch", "busy"}, {"stats", "idle", "busy", "nosuch"}} {
		if r := a.run(args...); r.code != 125 || !strings.Contains(r.stderr, `sandbox "nosuch" not found`) {
			t.Errorf("%v: want exit 125 naming nosuch: %v", args, r)
		}
	}
	// One sample period for four sandboxes: no more than one for one,
	// give or take, and well under four.
	for _, bin := range []string{"", full} {
		_, one := stats(bin, "idle")
		_, four := stats(bin, "busy", "idle", "idle2", "idle3")
		t.Logf("%s: stats of one sandbox %v, of four %v", bin, one, four)
		if four > one+900*time.Millisecond {
			t.Errorf("%s: stats of four sandboxes took %v, of one %v", bin, four, one)
		}
	}
}

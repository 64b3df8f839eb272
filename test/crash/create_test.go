//go:build linux

package crash

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// createKills is how many `sandbox create` processes are killed.
const createKills = 100

// TestKillCreate kills `sandbox create` (every other one with --start)
// with SIGKILL at random moments, 100 times, then checks that the state
// is never corrupt: the database passes SQLite's integrity check, every
// recorded sandbox reads back whole and can be started, used and removed,
// gc leaves nothing behind, and every name can be created again.
func TestKillCreate(t *testing.T) {
	a := newAK(t)
	loadTestImage(t, a)
	// How long an uninterrupted create takes sets the range of kill
	// moments.
	start := time.Now()
	if r := a.run(t, "sandbox", "create", "probe", "--image", imageRef, "--start"); r.code != 0 {
		t.Fatalf("create: %v", r)
	}
	full := time.Since(start)
	if r := a.run(t, "sandbox", "rm", "--force", "probe"); r.code != 0 {
		t.Fatalf("rm: %v", r)
	}
	killed := 0
	for i := 0; i < createKills; i++ {
		args := []string{"sandbox", "create", fmt.Sprintf("k%d", i), "--image", imageRef, "--label", "i=" + fmt.Sprint(i)}
		if i%2 == 1 {
			args = append(args, "--start")
		}
		c := a.cmd(context.Background(), args...)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rand.Int64N(int64(full + full/5))))
		if c.Process.Signal(syscall.SIGKILL) == nil {
			killed++
		}
		_ = c.Wait()
	}
	t.Logf("%d creates killed at random moments within %v", killed, full+full/5)

	// SQLite's own check.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(a.dataDir, "state.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	var check string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check: %q %v", check, err)
	}
	db.Close()

	// Every recorded sandbox reads back whole.
	r := a.run(t, "sandbox", "list", "--json")
	var list []struct {
		Name   string            `json:"name"`
		Status string            `json:"status"`
		Image  string            `json:"image"`
		Labels map[string]string `json:"labels"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil {
		t.Fatalf("list: %v", r)
	}
	running := 0
	for _, sb := range list {
		if sb.Image != imageRef || sb.Labels["i"] != strings.TrimPrefix(sb.Name, "k") || (sb.Status != "running" && sb.Status != "stopped") {
			t.Errorf("damaged record: %+v", sb)
		}
		if sb.Status == "running" {
			running++
		}
	}
	t.Logf("%d of %d recorded, %d running", len(list), createKills, running)
	// Each one works: start (or adopt), exec, remove.
	for i, sb := range list {
		if i%4 == 0 || sb.Status == "running" {
			if r := a.run(t, "sandbox", "start", sb.Name); r.code != 0 {
				t.Errorf("start %s: %v", sb.Name, r)
				continue
			}
			if r := a.run(t, "exec", sb.Name, "--", "cat", markerFile); r.code != 0 || r.stdout != marker+"\n" {
				t.Errorf("exec %s: %v", sb.Name, r)
			}
		}
		if r := a.run(t, "sandbox", "rm", "--force", sb.Name); r.code != 0 {
			t.Errorf("rm %s: %v", sb.Name, r)
		}
	}
	if r := a.run(t, "sandbox", "gc"); r.code != 0 {
		t.Errorf("gc: %v", r)
	}
	if ents, _ := os.ReadDir(filepath.Join(a.dataDir, "sandboxes")); len(ents) != 0 {
		t.Errorf("left in sandboxes/: %d entries, e.g. %s", len(ents), ents[0].Name())
	}
	if left := waitGone(func() []string { return ourProcesses(a.dataDir) }, 5*time.Second); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), a.dataDir) {
		t.Errorf("mounts left under %s", a.dataDir)
	}
	// Every name is free again.
	for i := 0; i < createKills; i += 9 {
		if r := a.run(t, "sandbox", "create", fmt.Sprintf("k%d", i), "--image", imageRef); r.code != 0 {
			t.Errorf("create again: %v", r)
		}
	}
}

//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestGVisorDaemonPool: the daemon's warm pools on the gvisor backend:
// 'daemon prewarm -B gvisor' fills a pool that 'daemon status' names
// with its backend; API runs naming gvisor take warm sandboxes of their
// own pool (hits), each clean (a file the previous run left is not
// there), under gVisor; 'daemon stop' leaves nothing behind
// (withGVisor's check).
func TestGVisorDaemonPool(t *testing.T) {
	a, ref := withGVisor(t)
	if r := a.run("daemon", "start"); r.code != 0 {
		t.Fatalf("daemon start: %v", r)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			a.run("daemon", "stop")
		}
	}
	t.Cleanup(stop)
	if r := a.run("daemon", "prewarm", "-B", "gvisor", "--image", ref, "-p", "restrictive"); r.code != 0 || !strings.Contains(r.stderr, "1 ready") {
		log, _ := os.ReadFile(filepath.Join(a.dataDir, "daemon", "daemon.log"))
		t.Fatalf("prewarm -B gvisor: %v\nstatus: %v\ndaemon log:\n%s", r, a.run("daemon", "status", "--json"), log)
	}
	if r := a.run("daemon", "prewarm", "-B", "nope", "--image", ref); r.code == 0 {
		t.Errorf("prewarm -B nope: %v", r)
	}
	if r := a.run("daemon", "status"); !strings.Contains(r.stdout, "backend gvisor: 1 ready") {
		t.Errorf("daemon status does not show the gvisor pool: %v", r)
	}
	hits := func() int {
		r := a.run("daemon", "status", "--json")
		var st struct {
			PoolRuns map[string]int `json:"pool_runs"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("status --json: %v %v", r, err)
		}
		return st.PoolRuns["hit"]
	}
	sock := filepath.Join(a.dataDir, "daemon", "api.sock")
	body := func(script string) string {
		return fmt.Sprintf(`{"command":["sh","-c",%q],"image":%q,"profile":"restrictive","backend":"gvisor"}`, script, ref)
	}
	// The first request of the server's own spec makes its pool (a
	// miss, run cold); later ones take warm sandboxes.
	script := "ls /tmp/left 2>&1; echo made > /tmp/left; dmesg 2>/dev/null | head -1"
	if out := sockRequest(t, sock, "POST", "/run", "application/json", body(script)); !strings.Contains(out, "200 OK") {
		t.Fatalf("first run: %s", out)
	}
	for i := 0; i < 2; i++ {
		deadline := time.Now().Add(30 * time.Second)
		// The request's spec (resolved by the daemon) and prewarm's
		// (resolved here) may differ: two pools, each of which must
		// hold a ready sandbox (the prewarmed one alone says nothing of
		// the request's).
		for !gvisorPoolsReady(t, a) {
			if time.Now().After(deadline) {
				t.Fatalf("the gvisor pool did not refill: %v", a.run("daemon", "status"))
			}
			time.Sleep(100 * time.Millisecond)
		}
		before := hits()
		out := sockRequest(t, sock, "POST", "/run", "application/json", body(script))
		if !strings.Contains(out, "200 OK") || !strings.Contains(out, "No such file") || !strings.Contains(out, "gVisor") {
			t.Errorf("pooled run %d: not clean, or not under gVisor: %s", i, out)
		}
		if hits() != before+1 {
			t.Errorf("pooled run %d did not take a warm sandbox", i)
		}
	}
	stop()
	if t.Failed() {
		log, _ := os.ReadFile(filepath.Join(a.dataDir, "daemon", "daemon.log"))
		t.Logf("daemon log:\n%s", regexp.MustCompile(`(?m)^.*path=/.*\n`).ReplaceAll(log, nil))
	}
}

// gvisorPoolsReady says whether the daemon has a gvisor pool and each of
// its gvisor pools holds a ready sandbox (daemon status --json).
func gvisorPoolsReady(t *testing.T, a *ak) bool {
	t.Helper()
	r := a.run("daemon", "status", "--json")
	var st struct {
		Pools []struct {
			Backend string `json:"backend"`
			Ready   int    `json:"ready"`
		} `json:"pools"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v %v", r, err)
	}
	n := 0
	for _, p := range st.Pools {
		if p.Backend != "gvisor" {
			continue
		}
		if p.Ready < 1 {
			return false
		}
		n++
	}
	return n > 0
}

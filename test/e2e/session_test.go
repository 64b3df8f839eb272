//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// sessionJSON is one entry of 'session list --json'.
type sessionJSON struct {
	Name      string  `json:"name"`
	Sandbox   string  `json:"sandbox"`
	Agent     string  `json:"agent"`
	Status    string  `json:"status"`
	ExecCount int     `json:"exec_count"`
	Snapshot  *string `json:"snapshot"`
}

func (a *ak) sessions() []sessionJSON {
	a.t.Helper()
	var out []sessionJSON
	r := a.must("session", "list", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		a.t.Fatalf("session list --json: %v: %q", err, r.stdout)
	}
	return out
}

// TestSessionLifecycle: a session's sandbox is made, used, saved and
// stopped; removed by hand, it comes back from the session's snapshot
// on resume with the file written before the save; list counts the
// execs; delete keeps the snapshot; refusals (a taken name, an unknown
// session, a resume with neither sandbox nor snapshot, a name that
// leaves the sessions directory) exit 125 with a clear message.
func TestSessionLifecycle(t *testing.T) {
	a, ref := withRegistry(t)
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "session-work") })
	r := a.must("session", "start", "--name", "work", "--agent", "opencode", "--image", ref)
	if r.stdout != "Session 'work' started.\n  Sandbox: session-work\nAttach with: agentkernel attach session-work\n" {
		t.Fatalf("start: %v", r)
	}
	if i := a.info("session-work"); i.Status != "running" {
		t.Fatalf("session's sandbox: %+v", i)
	}
	r = a.run("session", "start", "--name", "work", "--agent", "opencode", "--image", ref)
	if r.code != 125 || !strings.Contains(r.stderr, "Session 'work' already exists. Use 'session resume' or 'session delete' first.") {
		t.Fatalf("duplicate start: %v", r)
	}

	a.sh("session-work", "echo kept > /root/saved-file")
	r = a.must("session", "save", "work")
	m := regexp.MustCompile(`^Session 'work' saved \(snapshot: (work-\d{8}-\d{6})\)\n$`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("save: %v", r)
	}
	snap := m[1]
	t.Cleanup(func() { a.run("snapshot", "delete", snap) })
	// Written after the save: not in the snapshot.
	a.sh("session-work", "echo later > /root/later-file")
	if l := a.sessions(); len(l) != 1 || l[0].Status != "saved" || l[0].Snapshot == nil || *l[0].Snapshot != snap || l[0].ExecCount != 2 || l[0].Agent != "opencode" {
		t.Fatalf("list after save: %+v", l)
	}

	if r := a.must("session", "stop", "work"); r.stdout != "Session 'work' stopped.\n" {
		t.Fatalf("stop: %v", r)
	}
	if i := a.info("session-work"); i.Status != "stopped" {
		t.Fatalf("sandbox after stop: %+v", i)
	}
	a.must("sandbox", "rm", "session-work")

	r = a.must("session", "resume", "work")
	if r.stdout != "Session 'work' resumed.\n  Restored from snapshot: "+snap+"\nAttach with: agentkernel attach session-work\n" {
		t.Fatalf("resume: %v", r)
	}
	if got := a.sh("session-work", "cat /root/saved-file; ls /root"); got != "kept\nsaved-file\n" {
		t.Fatalf("restored sandbox's files: %q", got)
	}
	r = a.must("session", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME AGENT STATUS DURATION EXECS" {
		t.Fatalf("list: %v", r)
	}
	if f := strings.Fields(lines[1]); len(f) != 5 || f[0] != "work" || f[1] != "opencode" || f[2] != "running" || f[4] != "3" {
		t.Fatalf("list row: %q", lines[1])
	}
	// A second resume of a running session is a no-op start.
	if r := a.must("session", "resume", "work"); strings.Contains(r.stdout, "Restored") {
		t.Fatalf("resume of a running session: %v", r)
	}

	r = a.must("session", "delete", "work")
	if !strings.Contains(r.stdout, "Session 'work' deleted.") || !strings.Contains(r.stdout, "Snapshots kept") {
		t.Fatalf("delete: %v", r)
	}
	if l := a.sessions(); len(l) != 0 {
		t.Fatalf("list after delete: %+v", l)
	}
	if !strings.Contains(a.must("snapshot", "list").stdout, snap) {
		t.Fatalf("delete removed the snapshot")
	}
	if i := a.info("session-work"); i.Status != "running" {
		t.Fatalf("delete without --with-sandbox touched the sandbox: %+v", i)
	}

	// Refusals.
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"session", "resume", "work"}, `session "work" not found`},
		{[]string{"session", "stop", "nosuch"}, `session "nosuch" not found`},
		{[]string{"session", "save", "../work"}, "session name"},
		{[]string{"session", "delete", "a/b"}, "session name"},
		// session-work still exists, without a session.
		{[]string{"session", "start", "--name", "work", "--agent", "opencode", "--image", ref}, `sandbox "session-work" already exists and is not a session's`},
		{[]string{"session", "start", "--name", "x", "--agent", "bad agent", "--image", ref}, "agent"},
	} {
		if r := a.run(c.args...); r.code != 125 || !strings.Contains(r.stderr, c.msg) || strings.Contains(r.stderr, "goroutine") {
			t.Errorf("%v: want 125 and %q, got %v", c.args, c.msg, r)
		}
	}
	a.must("sandbox", "rm", "--force", "session-work")

	// Never saved, sandbox removed: nothing to resume from.
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "session-bare") })
	a.must("session", "start", "--name", "bare", "--agent", "codex", "--mode", "native", "--image", ref)
	a.must("sandbox", "rm", "--force", "session-bare")
	if r := a.run("session", "resume", "bare"); r.code != 125 || !strings.Contains(r.stderr, "never saved") {
		t.Fatalf("resume without sandbox or snapshot: %v", r)
	}
	if r := a.must("session", "delete", "bare", "--with-sandbox"); !strings.Contains(r.stdout, "deleted") {
		t.Fatalf("delete --with-sandbox of a gone sandbox: %v", r)
	}
	if _, err := os.Stat(filepath.Join(a.dataDir, "sessions", "bare.json")); !os.IsNotExist(err) {
		t.Fatalf("metadata after delete: %v", err)
	}
}

//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// wsScript prints what the workspace snapshot test looks at: the
// workspace's files, their contents, and the owner of a non-root user's
// file.
const wsScript = `cd /workspace && for f in orig.txt one del two; do [ -e $f ] && echo "$f: $(cat $f)"; done; stat -c '%u:%g %a' d/f`

// TestSnapshotWorkspace: a snapshot holds the copy-on-write view of the
// project (/workspace, profile moderate) as well as the root: what the
// sandbox wrote, changed and deleted there is what a sandbox restored
// from it sees (a running take and a stopped one), with its owners; the
// source goes on with its own edits, and the project directory never
// changes. A snapshot recorded before volumes had layers (its spec's
// mounts stack none) still restores: its /workspace is the project.
func TestSnapshotWorkspace(t *testing.T) {
	a, ref := withRegistry(t)
	if err := os.WriteFile(filepath.Join(a.dir, "orig.txt"), []byte("orig\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.dir, "del"), []byte("del\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.must("sandbox", "create", "wsrc", "--image", ref, "--start")
	t.Cleanup(func() {
		for _, n := range []string{"wsrc", "wsb", "wsc", "wsold"} {
			a.run("sandbox", "rm", "--force", n)
		}
	})
	a.sh("wsrc", `cd /workspace && echo changed > orig.txt && echo one > one && mkdir d && echo f > d/f && chown -R 1000:1001 d && chmod 640 d/f`)
	atTake := a.sh("wsrc", wsScript)
	if want := "orig.txt: changed\none: one\ndel: del\n1000:1001 640\n"; atTake != want {
		t.Fatalf("set-up: %q, want %q", atTake, want)
	}

	// A running take.
	a.must("snapshot", "take", "wsrc", "--name", "w1")
	a.sh("wsrc", `cd /workspace && rm del && echo two > two && echo again > orig.txt`)
	later := a.sh("wsrc", wsScript)
	a.must("snapshot", "restore", "w1", "--as", "wsb")
	a.must("sandbox", "start", "wsb")
	if got := a.sh("wsb", wsScript); got != atTake {
		t.Errorf("restored from a running take, /workspace is %q; at the take it was %q", got, atTake)
	}
	if got := a.sh("wsrc", wsScript); got != later {
		t.Errorf("the source's /workspace changed: %q, was %q", got, later)
	}

	// A stopped take: the source keeps its edits when started again,
	// and the restored sandbox has them too.
	a.must("sandbox", "stop", "wsrc")
	a.must("snapshot", "take", "wsrc", "--name", "w2")
	a.must("sandbox", "start", "wsrc")
	if got := a.sh("wsrc", wsScript); got != later {
		t.Errorf("after a stopped take and a start, the source's /workspace is %q, was %q", got, later)
	}
	a.sh("wsrc", `echo three > /workspace/three`)
	a.must("snapshot", "restore", "w2", "--as", "wsc")
	a.must("sandbox", "start", "wsc")
	if got := a.sh("wsc", wsScript); got != later {
		t.Errorf("restored from a stopped take, /workspace is %q, want %q", got, later)
	}
	if r := a.run("exec", "wsc", "--", "cat", "/workspace/three"); r.code == 0 {
		t.Errorf("the source's write after the take reached the restored sandbox")
	}

	// The project itself never changed.
	if b, _ := os.ReadFile(filepath.Join(a.dir, "orig.txt")); string(b) != "orig\n" {
		t.Errorf("the project's orig.txt changed: %q", b)
	}
	for _, f := range []string{"one", "two", "three", "d"} {
		if _, err := os.Stat(filepath.Join(a.dir, f)); err == nil {
			t.Errorf("%s reached the project directory", f)
		}
	}

	// A snapshot from before volumes had layers.
	meta := filepath.Join(a.dataDir, "snapshots", "w1.json")
	b, err := os.ReadFile(meta)
	if err != nil {
		t.Fatal(err)
	}
	var sm map[string]any
	if err := json.Unmarshal(b, &sm); err != nil {
		t.Fatal(err)
	}
	spec := sm["spec"].(map[string]any)
	stacked := 0
	for _, m := range spec["mounts"].([]any) {
		mm := m.(map[string]any)
		if l, ok := mm["layers"].([]any); ok {
			stacked += len(l)
		}
		delete(mm, "layers")
	}
	if stacked != 1 {
		t.Errorf("snapshot w1 stacks %d volume layers, want 1: %s", stacked, b)
	}
	old, err := json.Marshal(sm)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.dataDir, "snapshots", "wold.json"), old, 0o600); err != nil {
		t.Fatal(err)
	}
	a.must("snapshot", "restore", "wold", "--as", "wsold")
	a.must("sandbox", "start", "wsold")
	if got, want := a.sh("wsold", `cd /workspace && cat orig.txt del; ls`), "orig\ndel\ndel\norig.txt\n"; got != want {
		t.Errorf("restored from an old snapshot, /workspace is %q, want the project's %q", got, want)
	}
	a.must("snapshot", "delete", "wold")
}

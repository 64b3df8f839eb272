//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/image/imagetest"
	"github.com/agentkernel/agentkernel/pkg/client"
)

// sh runs script in the sandbox and returns its output.
func (a *ak) sh(name, script string) string {
	a.t.Helper()
	return a.must("exec", name, "--", "sh", "-c", script).stdout
}

// stateScript prints what the snapshot tests look at: which of the
// files exist, and the owner of the non-root user's file.
const stateScript = `for f in /root/one /root/del /root/two /etc/agentkernel-test; do [ -e $f ] && echo "$f"; done; stat -c '%u:%g %a' /home/u/f`

// TestSnapshotTakeRestore: a snapshot of a running sandbox holds the
// files as they were at the take (a later write and delete in the source
// are not in it), a non-root user's file keeps its owner, the source
// keeps its own state; a stopped sandbox's snapshot leaves the sandbox
// as it was when started again, and its restore sees the deletions (the
// overlay's whiteouts survive); refusals (unknown snapshot or sandbox,
// a taken name) exit 125 with a clear message and change nothing; a
// deleted snapshot's layers stay under the sandboxes that stack them.
func TestSnapshotTakeRestore(t *testing.T) {
	a, _ := newSandbox(t, "snapsrc")
	a.sh("snapsrc", `echo one > /root/one && echo del > /root/del && mkdir -p /home/u && echo f > /home/u/f && chown -R 1000:1001 /home/u && chmod 640 /home/u/f`)
	before := a.sh("snapsrc", stateScript)
	if !strings.Contains(before, "1000:1001 640") || !strings.Contains(before, "/root/del") {
		t.Fatalf("set-up: %q", before)
	}
	if r := a.must("snapshot", "take", "snapsrc", "--name", "s1"); strings.TrimSpace(r.stdout) != "s1" {
		t.Fatalf("take: %v", r)
	}
	// The source runs on after the take (thawed).
	a.sh("snapsrc", `echo two > /root/two && rm /root/del /etc/agentkernel-test`)
	srcState := a.sh("snapsrc", stateScript)
	if strings.Contains(srcState, "/root/del") || !strings.Contains(srcState, "/root/two") {
		t.Fatalf("source after its changes: %q", srcState)
	}

	if r := a.must("snapshot", "restore", "s1", "--as", "snapb"); strings.TrimSpace(r.stdout) != "snapb" {
		t.Fatalf("restore: %v", r)
	}
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "snapb") })
	if i := a.info("snapb"); i.Status != "stopped" {
		t.Errorf("restored sandbox: %+v", i)
	}
	a.must("sandbox", "start", "snapb")
	if got := a.sh("snapb", stateScript); got != before {
		t.Errorf("restored sandbox sees %q, the state at the take was %q", got, before)
	}
	if got := a.sh("snapsrc", stateScript); got != srcState {
		t.Errorf("the source changed: %q, was %q", got, srcState)
	}
	// The restored sandbox writes its own layer.
	a.sh("snapb", `echo b > /root/b`)
	if r := a.run("exec", "snapsrc", "--", "cat", "/root/b"); r.code == 0 {
		t.Errorf("a restored sandbox's write reached the source")
	}

	// Refusals.
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"snapshot", "restore", "nosuch"}, `snapshot "nosuch" not found`},
		{[]string{"snapshot", "restore", "s1", "--as", "snapb"}, `sandbox "snapb" already exists`},
		{[]string{"snapshot", "take", "nosuchsb"}, `sandbox "nosuchsb" not found`},
		{[]string{"snapshot", "take", "snapsrc", "--name", "s1"}, `snapshot "s1" already exists`},
		{[]string{"snapshot", "delete", "nosuch"}, `snapshot "nosuch" not found`},
		{[]string{"snapshot", "take", "snapsrc", "--name", "../x"}, `invalid character`},
		{[]string{"snapshot", "restore", "../s1"}, `invalid character`},
	} {
		if r := a.run(c.args...); r.code != 125 || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%v: want exit 125 with %q: %v", c.args, c.msg, r)
		}
	}
	if got := a.sh("snapb", stateScript); got != before {
		t.Errorf("a refused restore changed the restored sandbox: %q", got)
	}

	// A stopped sandbox: its snapshot is its layer, and it goes on over it.
	a.must("sandbox", "stop", "snapsrc")
	a.must("snapshot", "take", "snapsrc", "--name", "s2")
	a.must("sandbox", "start", "snapsrc")
	if got := a.sh("snapsrc", stateScript); got != srcState {
		t.Errorf("the stopped-taken source after start: %q, was %q", got, srcState)
	}
	a.must("snapshot", "restore", "s2", "--as", "snapc")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "snapc") })
	a.must("sandbox", "start", "snapc")
	if got := a.sh("snapc", stateScript); got != srcState {
		t.Errorf("restore of the stopped take: %q, want %q", got, srcState)
	}

	var list []struct {
		Name    string `json:"name"`
		Sandbox string `json:"sandbox"`
		Layers  int    `json:"layers"`
	}
	r := a.must("snapshot", "list", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 2 || list[0].Name != "s1" || list[1].Name != "s2" || list[0].Sandbox != "snapsrc" || list[1].Layers != list[0].Layers {
		t.Errorf("list: %v %s", err, r.stdout)
	}
	if r := a.must("snapshot", "list"); !strings.Contains(r.stdout, "NAME") || !strings.Contains(r.stdout, "s2") {
		t.Errorf("list table: %v", r)
	}

	// Deleting the snapshots leaves the sandboxes that stack their layers whole.
	a.must("snapshot", "delete", "s1")
	a.must("snapshot", "delete", "s2")
	a.must("sandbox", "gc")
	for _, n := range []string{"snapb", "snapsrc", "snapc"} {
		a.must("sandbox", "restart", n)
		if got := a.sh(n, "cat /root/one"); got != "one\n" {
			t.Errorf("%s after its snapshot's delete: %q", n, got)
		}
	}
	if r := a.must("snapshot", "list", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("list after delete: %v", r)
	}
	audit := a.audit("--sandbox", "snapsrc")
	found := false
	for _, e := range audit {
		found = found || e.Action == "snapshot"
	}
	if !found {
		t.Errorf("no snapshot entry in the audit log: %+v", audit)
	}
}

// TestRootlessSnapshot: as an unprivileged user, a stopped sandbox's
// snapshot restores with its files and their owners (the same map in
// every sandbox of the user: nothing moves); a running one's is refused
// with a clear message, the sandbox left running as it was.
func TestRootlessSnapshot(t *testing.T) {
	a, uid := rootlessAK(t)
	_, ref := withRegistry(t)
	// This host gives an unprivileged user no cgroup: the user lets
	// sandboxes go without limits.
	cfg := filepath.Join(a.home, ".config", "agentkernel")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg, "config.toml"), []byte("[security]\nallow_degraded = [\"cgroups\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(a.home, ".config"), cfg, filepath.Join(cfg, "config.toml")} {
		if err := os.Chown(p, uid, -1); err != nil {
			t.Fatal(err)
		}
	}
	a.must("sandbox", "create", "rls", "--image", ref, "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "rls") })
	// With the user's subordinate ids another user's file keeps its
	// owner; with the one-id map only root's exist.
	a.sh("rls", `echo one > /root/one && echo del > /root/del && mkdir -p /home/u && echo f > /home/u/f && (chown -R 1000:1001 /home/u 2>/dev/null; true) && chmod 640 /home/u/f`)
	before := a.sh("rls", stateScript)
	if r := a.run("snapshot", "take", "rls", "--name", "r1"); r.code != 125 || !strings.Contains(r.stderr, "stop the sandbox first") {
		t.Errorf("running rootless take: %v", r)
	}
	if got := a.sh("rls", stateScript); got != before {
		t.Errorf("a refused take changed the sandbox: %q, was %q", got, before)
	}
	a.must("sandbox", "stop", "rls")
	a.must("snapshot", "take", "rls", "--name", "r1")
	a.must("sandbox", "start", "rls")
	a.sh("rls", `rm /root/del; echo two > /root/two`)
	a.must("snapshot", "restore", "r1")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "rls-restored") })
	a.must("sandbox", "start", "rls-restored")
	if got := a.sh("rls-restored", stateScript); got != before {
		t.Errorf("rootless restore sees %q, want %q", got, before)
	}
	a.must("snapshot", "delete", "r1")
}

// testSnapshotsAPI is TestAPIContract's round trip of the snapshot
// routes through pkg/client (and raw requests for what the client does
// not send): take, list, get, restore (default name, stopped, its files
// there once started), delete, and the refusals' statuses; every answer
// is validated against openapi.yaml with the others.
func testSnapshotsAPI(t *testing.T, s *apiServer, c *client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "tools/busybox:1", testImage(t, "api-snapshot"))
	if _, err := c.CreateSandbox(ctx, client.CreateOptions{Name: "snapapi", Image: ref}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.RemoveSandbox(context.Background(), "snapapi")
		_ = c.RemoveSandbox(context.Background(), "snapapi-restored")
	})
	if _, err := c.Exec(ctx, "snapapi", []string{"sh", "-c", "echo kept > /root/kept"}, nil); err != nil {
		t.Fatal(err)
	}
	sn, err := c.TakeSnapshot(ctx, "snapapi", "apisnap")
	if err != nil || sn.Name != "apisnap" || sn.Sandbox != "snapapi" || sn.Layers < 2 || sn.CreatedAt == "" {
		t.Fatalf("take: %+v %v", sn, err)
	}
	if _, err := c.TakeSnapshot(ctx, "snapapi", "apisnap"); !errors.Is(err, client.ErrConflict) {
		t.Errorf("take onto a taken name: %v", err)
	}
	if _, err := c.TakeSnapshot(ctx, "nosuch", "other"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("take of a missing sandbox: %v", err)
	}
	s.raw("POST", "/snapshots", `{"sandbox":"snapapi","name":"../etc"}`).expect(t, "hostile name", 400, `snapshot name "../etc" contains invalid character*`)
	s.raw("POST", "/snapshots", `{"name":"x"}`).expect(t, "no sandbox", 400, "*")
	s.raw("POST", "/snapshots", `{"sandbox":"snapapi","name":"memx","memory":true}`).expect(t, "memory of a native sandbox", 400, `sandbox "snapapi" runs on backend native, which has no memory snapshots (gvisor sandboxes do)*`)
	if _, err := c.TakeMemorySnapshot(ctx, "snapapi", "memy"); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("a memory snapshot of a native sandbox through the client: %v", err)
	}
	s.raw("GET", "/snapshots/..", "").expect(t, "dot-dot name", 400, "*")
	if all, err := c.ListSnapshots(ctx); err != nil || len(all) != 1 || all[0].Name != "apisnap" {
		t.Errorf("list: %+v %v", all, err)
	}
	if got, err := c.GetSnapshot(ctx, "apisnap"); err != nil || got.Sandbox != "snapapi" {
		t.Errorf("get: %+v %v", got, err)
	}
	if _, err := c.GetSnapshot(ctx, "nosuch"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("get of an unknown snapshot: %v", err)
	}
	sb, err := c.RestoreSnapshot(ctx, "apisnap", "")
	if err != nil || sb.Name != "snapapi-restored" || sb.Status != "stopped" {
		t.Fatalf("restore: %+v %v", sb, err)
	}
	if _, err := c.RestoreSnapshot(ctx, "apisnap", "snapapi"); !errors.Is(err, client.ErrConflict) {
		t.Errorf("restore onto an existing sandbox: %v", err)
	}
	if _, err := c.RestoreSnapshot(ctx, "nosuch", "x"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("restore of an unknown snapshot: %v", err)
	}
	if err := c.StartSandbox(ctx, "snapapi-restored"); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Exec(ctx, "snapapi-restored", []string{"cat", "/root/kept"}, nil); err != nil || out != "kept\n" {
		t.Errorf("restored sandbox: %q %v", out, err)
	}
	if err := c.DeleteSnapshot(ctx, "apisnap"); err != nil {
		t.Error(err)
	}
	if err := c.DeleteSnapshot(ctx, "apisnap"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("delete of a deleted snapshot: %v", err)
	}
}

//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDataDirInProject: run from a project directory that holds
// agentkernel's data directory (a user running from $HOME, whose data
// directory is ~/.local/share/agentkernel), a sandbox does not get the
// data directory (state, snapshots, keys): the project is not mounted,
// with a warning that says why; a volume of it is refused; a persistent
// sandbox made there does not see it either.
func TestDataDirInProject(t *testing.T) {
	a, ref := withRegistry(t)
	project := t.TempDir()
	if err := os.WriteFile(filepath.Join(project, "marker"), []byte("project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.dataDir = filepath.Join(project, ".local", "share", "agentkernel")
	a.dir = project
	probe := "cat /workspace/marker 2>&1; ls -a /workspace/.local 2>&1; find / -xdev -name state.db 2>/dev/null; echo done"
	r := a.run("run", "--image", ref, "--", "sh", "-c", probe)
	if r.code != 0 || !strings.Contains(r.stderr, "holds agentkernel's data directory") || strings.Contains(r.stdout, "project\n") ||
		strings.Contains(r.stdout, "state.db") || !strings.HasSuffix(r.stdout, "done\n") {
		t.Fatalf("run from a project holding the data directory: %v", r)
	}
	// A project beside it is mounted as ever.
	sub := filepath.Join(project, "src")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "marker"), []byte("src\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := *a
	b.dir = sub
	if r := b.run("run", "--image", ref, "--", "cat", "/workspace/marker"); r.code != 0 || r.stdout != "src\n" || strings.Contains(r.stderr, "data directory") {
		t.Fatalf("run from a project beside the data directory: %v", r)
	}
	// Volumes holding it: refused before anything runs.
	for _, v := range []string{project + ":/p", filepath.Join(project, ".local") + ":/l:ro", a.dataDir + ":/d"} {
		if r := b.run("run", "--image", ref, "-v", v, "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "holds agentkernel's data directory") {
			t.Errorf("-v %s: %v", v, r)
		}
	}
	// A persistent sandbox made in that project.
	if r := a.run("sandbox", "create", "dd", "--image", ref, "--start"); r.code != 0 || !strings.Contains(r.stderr, "holds agentkernel's data directory") {
		t.Fatalf("sandbox create: %v", r)
	}
	defer a.run("sandbox", "remove", "dd", "--force")
	if r := a.run("exec", "dd", "--", "sh", "-c", probe); r.code != 0 || strings.Contains(r.stdout, "project\n") || strings.Contains(r.stdout, "state.db") {
		t.Fatalf("persistent sandbox sees the project holding the data directory: %v", r)
	}
}

//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRootWriteOneRule: a root with a writable layer (permissive,
// moderate) lets the sandbox's root create entries at the top of /, as
// docker does, for run and exec alike, and what cp puts at the top level
// stays writable for later commands; restrictive's root is read-only and
// says so.
func TestRootWriteOneRule(t *testing.T) {
	a, ref := newSandbox(t, "rootw")
	const script = "mkdir /foo && echo hi >/foo/f && touch /bar && ln -s /foo /baz && cat /baz/f"
	for _, p := range []string{"permissive", "moderate"} {
		if r := a.run("run", "--image", ref, "-p", p, "--", "sh", "-c", script); r.code != 0 || r.stdout != "hi\n" {
			t.Errorf("run -p %s: %v", p, r)
		}
	}
	r := a.run("run", "--image", ref, "-p", "restrictive", "--", "sh", "-c", "touch /bar")
	if r.code == 0 || !strings.Contains(strings.ToLower(r.stderr), "read-only file system") {
		t.Errorf("run -p restrictive: %v, want a read-only root", r)
	}

	// A persistent sandbox: exec creates at the top level, and a file
	// and a directory cp made there after the start are writable too.
	if r := a.run("exec", "rootw", "--", "sh", "-c", script); r.code != 0 || r.stdout != "hi\n" {
		t.Errorf("exec: %v", r)
	}
	host := filepath.Join(t.TempDir(), "top.txt")
	if err := os.WriteFile(host, []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.must("cp", host, "rootw:/top.txt")
	a.must("exec", "rootw", "--", "mkdir", "/later")
	r = a.run("exec", "rootw", "--", "sh", "-c", "echo two >>/top.txt && echo three >/later/f && cat /top.txt /later/f")
	if r.code != 0 || r.stdout != "one\ntwo\nthree\n" {
		t.Errorf("exec after cp: %v", r)
	}
}

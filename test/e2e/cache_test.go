//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGoCache: run --cache go keeps Go's module and build caches under
// the data directory, so a second 'go test' of the same module in a new
// sandbox answers from the cache ("(cached)"); a sandbox without it
// has caches of its own. Bad cache names are refused before anything
// runs.
func TestGoCache(t *testing.T) {
	if fi, err := os.Stat("/usr/local/go/bin/go"); err != nil || fi.IsDir() {
		t.Skip("no Go toolchain at /usr/local/go on this host")
	}
	a := newAK(t)
	files := map[string]string{
		"go.mod":       "module example.com/cached\n\ngo 1.21\n",
		"c.go":         "package cached\n\nfunc Two() int { return 2 }\n",
		"c_test.go":    "package cached\n\nimport \"testing\"\n\nfunc TestTwo(t *testing.T) {\n\tif Two() != 2 {\n\t\tt.Fatal(\"two\")\n\t}\n}\n",
		"README.cache": "the project of TestGoCache\n",
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(a.dir, n), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goTest := func(extra ...string) result {
		args := append([]string{"-q", "run", "--timeout", "5m", "--image", "host"}, extra...)
		return runLong(a, 5*time.Minute, append(args, "--", "go", "test", "./...")...)
	}
	r := goTest("--cache", "go")
	if r.code != 0 || !strings.Contains(r.stdout, "ok  \texample.com/cached") {
		t.Fatalf("first go test with --cache go: %v", r)
	}
	if strings.Contains(r.stdout, "(cached)") {
		t.Fatalf("the first run cannot be cached: %v", r)
	}
	build := filepath.Join(a.dataDir, "caches", "go", "build")
	if ents, err := os.ReadDir(build); err != nil || len(ents) == 0 {
		t.Fatalf("no build cache kept in %s: %v", build, err)
	}
	r = goTest("--cache", "go")
	if r.code != 0 || !strings.Contains(r.stdout, "(cached)") {
		t.Fatalf("second go test with --cache go did not use the cache: %v", r)
	}
	// Without it, Go's caches are the sandbox's own (gone with it).
	r = a.run("-q", "run", "--image", "host", "--", "go", "env", "GOCACHE")
	if r.code != 0 || strings.HasPrefix(r.stdout, "/var/cache/agentkernel/") {
		t.Fatalf("go env GOCACHE without --cache: %v", r)
	}
	// [cache] in the project's configuration mounts the same cache, and
	// --cache none turns it off.
	if err := os.WriteFile(filepath.Join(a.dir, "agentkernel.toml"), []byte("[cache]\ntools = [\"go\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = a.run("-q", "run", "--image", "host", "--", "go", "env", "GOCACHE")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "/var/cache/agentkernel/go/build" {
		t.Fatalf("[cache] tools = [\"go\"]: %v", r)
	}
	r = a.run("-q", "run", "--image", "host", "--cache", "none", "--", "go", "env", "GOCACHE")
	if r.code != 0 || strings.HasPrefix(r.stdout, "/var/cache/agentkernel/") {
		t.Fatalf("--cache none: %v", r)
	}
	for _, bad := range [][]string{{"--cache", "maven"}, {"--cache", "go,"}, {"--cache", "none,go"}} {
		r = a.run(append(append([]string{"run", "--image", "host"}, bad...), "--", "true")...)
		if r.code != 125 || !strings.Contains(r.stderr, "--cache") {
			t.Errorf("%v: want exit 125 naming --cache, got %v", bad, r)
		}
	}
}

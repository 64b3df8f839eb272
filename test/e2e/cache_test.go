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

// TestCacheAttack: a cache is a host directory that every sandbox naming
// it writes. From inside, the sandbox's root tries to plant what a later
// sandbox or the host would trip on: a set-uid file, a device node, a
// file capability, and a symbolic link to a host secret. Each plant
// fails, and the link, followed by the next sandbox, resolves in that
// sandbox's own root, never the host's.
func TestCacheAttack(t *testing.T) {
	a := newAK(t)
	const plant = `cd /var/cache/agentkernel/pip || exit 9
cp /bin/sh ./sh && chmod 4755 ./sh 2>/dev/null && echo PLANTED-SETUID
chmod u+s ./sh 2>/dev/null && echo PLANTED-SETUID2
mknod ./null c 1 3 2>/dev/null && echo PLANTED-DEVICE
setcap cap_sys_admin+ep ./sh 2>/dev/null && echo PLANTED-FCAP
ln -s /etc/shadow ./shadow && echo LINKED
echo DONE`
	// The control: the same plant in the sandbox's own /tmp works, so a
	// refusal in the cache is the cache's fence, not a broken probe.
	r := a.run("-q", "run", "--image", "host", "--", "sh", "-c", strings.Replace(plant, "/var/cache/agentkernel/pip", "/tmp", 1))
	if !strings.Contains(r.stdout, "PLANTED-SETUID") {
		t.Fatalf("the control could not plant a set-uid file in /tmp: %v", r)
	}
	r = a.run("-q", "run", "--image", "host", "--cache", "pip", "--", "sh", "-c", plant)
	if r.code != 0 || !strings.Contains(r.stdout, "DONE") || !strings.Contains(r.stdout, "LINKED") || strings.Contains(r.stdout, "PLANTED") {
		t.Fatalf("planting in the cache: %v", r)
	}
	dir := filepath.Join(a.dataDir, "caches", "pip")
	fi, err := os.Stat(filepath.Join(dir, "sh"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Errorf("the host sees a set-id file in the cache: %v", fi.Mode())
	}
	if _, err := os.Lstat(filepath.Join(dir, "null")); err == nil {
		t.Error("a device node was made in the cache")
	}
	host, _ := os.ReadFile("/etc/shadow")
	r = a.run("-q", "run", "--image", "host", "--cache", "pip", "--", "cat", "/var/cache/agentkernel/pip/shadow")
	if len(host) > 0 && strings.Contains(r.stdout, strings.SplitN(string(host), "\n", 2)[0]) {
		t.Errorf("a later sandbox read the host's /etc/shadow through the cache's link: %v", r)
	}
}

//go:build linux

package e2e

// A new user's first hour, on an offline machine: the README's tour, a
// Python project's tests, a Go module's tests through the host's
// toolchain with its caches kept, a Node project, and a persistent
// sandbox that files go in and out of, plain and as tar streams.

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestNewUserTour: a fresh data dir and nothing but the host's tools
// and a busybox image loaded as alpine:3.20 (no registry can be
// reached), driven as a new user drives it, each step's output and
// exit status checked.
func TestNewUserTour(t *testing.T) {
	a := newAK(t)
	loadAs(t, a, "alpine:3.20", "tour-alpine")

	// The tour's first lines.
	r := a.run("run", "--", "sh", "-c", "id; hostname; ls /; cat /etc/agentkernel-test")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "uid=0(root) gid=0(root)") || !strings.Contains(r.stdout, "\nworkspace\n") ||
		!strings.HasSuffix(r.stdout, "tour-alpine\n") {
		t.Errorf("run -- sh -c 'id; hostname; ls /': %v", r)
	}
	if host, _ := os.Hostname(); host != "" && strings.Contains(r.stdout, "\n"+host+"\n") {
		t.Errorf("the sandbox has the host's name %q: %v", host, r)
	}
	r = a.run("run", "-p", "restrictive", "--", "touch", "/x")
	if r.code != 1 || !strings.Contains(r.stderr, "Read-only file system") {
		t.Errorf("run -p restrictive -- touch /x: %v", r)
	}
	if err := os.WriteFile(filepath.Join(a.dir, "job"), []byte("#!/bin/sh\nsleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = a.run("run", "--memory", "64m", "--timeout", "1s", "--", "./job")
	if r.code != 124 || !strings.Contains(r.stderr, "timeout") {
		t.Errorf("run --timeout 1s -- ./job (sleeps): want exit 124, %v", r)
	}
	os.Remove(filepath.Join(a.dir, "job"))
	r = a.run("run", "--dry-run", "--", "make", "test")
	if r.code != 0 || !strings.Contains(r.stdout, `"image": "gcc:`) || !strings.Contains(r.stdout, `"make"`) {
		t.Errorf("run --dry-run -- make test: %v", r)
	}
	r = a.run("detect", "--", "cargo", "test")
	if r.code != 0 || !strings.Contains(r.stdout, "rust:") || !strings.Contains(r.stdout, `command "cargo"`) {
		t.Errorf("detect -- cargo test: %v", r)
	}
	r = a.run("images", "list")
	if r.code != 0 || !regexp.MustCompile(`(?m)^alpine +3\.20 `).MatchString(r.stdout) {
		t.Errorf("images list: %v", r)
	}
	r = a.run("profiles")
	if r.code != 0 || !strings.Contains(r.stdout, "permissive") || !strings.Contains(r.stdout, "restrictive") {
		t.Errorf("profiles: %v", r)
	}

	for _, step := range []struct {
		name string
		f    func(*testing.T, *ak)
	}{{"python", tourPython}, {"go", tourGo}, {"node", tourNode}, {"persistent", tourPersistent}} {
		t.Run(step.name, func(t *testing.T) {
			b := *a
			b.t = t
			step.f(t, &b)
		})
	}
}

// tourPython: python:3.12-alpine is detected, is not cached and cannot
// be pulled, so the run falls back to the host's python3 and says so;
// unittest's verdict is the exit status, a failing case included.
func tourPython(t *testing.T, a *ak) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no python3 on this host")
	}
	proj := filepath.Join(a.dir, "pyproj")
	writeFiles(t, proj, map[string]string{
		"calc.py": "def add(a, b):\n    return a + b\n",
		"test_calc.py": "import unittest\nfrom calc import add\n\n" +
			"class T(unittest.TestCase):\n" +
			"    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n" +
			"    def test_wrong(self):\n        self.assertEqual(add(2, 2), 5)\n",
	})
	p := *a
	p.dir = proj
	r := p.run("run", "--", "python3", "-m", "unittest", "-v")
	if r.code != 1 || !strings.Contains(r.stderr, "test_add (test_calc.T") || !strings.Contains(r.stderr, "Ran 2 tests") ||
		!strings.Contains(r.stderr, "FAILED (failures=1)") || !strings.Contains(r.stderr, "AssertionError: 4 != 5") {
		t.Errorf("unittest with a failing case: want exit 1, %v", r)
	}
	if !strings.Contains(r.stderr, "python:3.12-alpine is not cached") || !strings.Contains(r.stderr, "host's own tools") {
		t.Errorf("the fallback to the host's python3 was not said: %v", r)
	}
	writeFiles(t, proj, map[string]string{"test_calc.py": "import unittest\nfrom calc import add\n\n" +
		"class T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n" +
		"    def test_zero(self):\n        self.assertEqual(add(0, 0), 0)\n"})
	r = p.run("-q", "run", "--", "python3", "-m", "unittest")
	if r.code != 0 || !strings.Contains(r.stderr, "Ran 2 tests") || !strings.HasSuffix(r.stderr, "\nOK\n") {
		t.Errorf("unittest, all passing: want exit 0, %v", r)
	}
	// The project is copy-on-write: what the tests wrote (__pycache__)
	// stayed in the sandbox.
	if _, err := os.Stat(filepath.Join(proj, "__pycache__")); err == nil {
		t.Error("the moderate profile's run wrote __pycache__ into the project")
	}
}

// Go's build cache warmed by TestNewUserTour, for the README's own
// 'run --cache go -- go test ./...' (set when the tour ran first).
var (
	warmGoCacheMu sync.Mutex
	warmGoCache   string
)

// tourGo: a Go module's tests through the host image with --cache go:
// the first run fills the cache (and may take a while), the second
// answers from it ("(cached)": nothing rebuilt; its time is logged, not
// asserted, as a timed check would fail on a loaded machine); a failing
// test fails the run.
func tourGo(t *testing.T, a *ak) {
	if fi, err := os.Stat("/usr/local/go/bin/go"); err != nil || fi.IsDir() {
		t.Skip("no Go toolchain at /usr/local/go on this host")
	}
	proj := filepath.Join(a.dir, "gomod")
	writeFiles(t, proj, map[string]string{
		"go.mod":       "module example.com/tour\n\ngo 1.21\n",
		"tour.go":      "package tour\n\nfunc Double(n int) int { return 2 * n }\n",
		"tour_test.go": "package tour\n\nimport \"testing\"\n\nfunc TestDouble(t *testing.T) {\n\tif Double(21) != 42 {\n\t\tt.Fatal(\"double\")\n\t}\n}\n",
	})
	p := *a
	p.dir = proj
	goTest := func(args ...string) result {
		return runLong(&p, 8*time.Minute, append([]string{"-q", "run", "--timeout", "8m", "--image", "host", "--cache", "go", "--"}, args...)...)
	}
	first := goTest("go", "test", "./...")
	if first.code != 0 || !strings.Contains(first.stdout, "ok  \texample.com/tour") {
		t.Fatalf("first go test: %v", first)
	}
	second := goTest("go", "test", "./...")
	t.Logf("go test through --image host --cache go: first %v, second %v", first.took.Round(time.Millisecond), second.took.Round(time.Millisecond))
	if second.code != 0 || !strings.Contains(second.stdout, "ok  \texample.com/tour\t(cached)") {
		t.Fatalf("second go test: %v", second)
	}
	// A failing test: go test's exit status 1, and its message.
	writeFiles(t, proj, map[string]string{"tour.go": "package tour\n\nfunc Double(n int) int { return 2*n + 1 }\n"})
	r := goTest("go", "test", "./...")
	if r.code != 1 || !strings.Contains(r.stdout, "--- FAIL: TestDouble") || !strings.Contains(r.stdout, "FAIL\texample.com/tour") {
		t.Errorf("go test with a failing test: want exit 1, %v", r)
	}
	seed := filepath.Join(filepath.Dir(binary), "go-cache-seed")
	if out, err := exec.Command("cp", "-a", filepath.Join(a.dataDir, "caches", "go"), seed).CombinedOutput(); err == nil {
		warmGoCacheMu.Lock()
		warmGoCache = seed
		warmGoCacheMu.Unlock()
	} else {
		t.Logf("keeping the warm Go cache for later tests: %v %s", err, out)
	}
}

// tourNode: a Node project's tests (node's own runner, through npm test)
// with the host's node, offline.
func tourNode(t *testing.T, a *ak) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("no node on this host")
	}
	proj := filepath.Join(a.dir, "nodeproj")
	writeFiles(t, proj, map[string]string{
		"package.json": `{"name": "tour", "version": "1.0.0", "scripts": {"test": "node --test"}}` + "\n",
		"sum.js":       "module.exports = (a, b) => a + b;\n",
		"test/sum.test.js": "const test = require('node:test');\nconst assert = require('node:assert');\nconst sum = require('../sum');\n" +
			"test('adds', () => assert.strictEqual(sum(2, 3), 5));\ntest('adds zero', () => assert.strictEqual(sum(7, 0), 7));\n",
	})
	p := *a
	p.dir = proj
	r := p.run("-q", "run", "--image", "host", "--no-network", "--", "node", "-e", "console.log(require('./sum')(40, 2))")
	if r.code != 0 || r.stdout != "42\n" {
		t.Errorf("node -e: %v", r)
	}
	r = p.run("-q", "run", "--image", "host", "--no-network", "--", "npm", "test")
	if r.code != 0 || !strings.Contains(r.stdout, "# pass 2") || !strings.Contains(r.stdout, "# fail 0") {
		t.Errorf("npm test, all passing: %v", r)
	}
	writeFiles(t, proj, map[string]string{"sum.js": "module.exports = (a, b) => a - b;\n"})
	r = p.run("-q", "run", "--image", "host", "--no-network", "--", "npm", "test")
	if r.code != 1 || !strings.Contains(r.stdout, "# pass 1") || !strings.Contains(r.stdout, "# fail 1") {
		t.Errorf("npm test with a failing test: want exit 1, %v", r)
	}
}

// tourPersistent: a sandbox that stays up; files in and out with cp,
// plain and as tar streams ("-"), checked on both sides.
func tourPersistent(t *testing.T, a *ak) {
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "dev") })
	if r := a.run("sandbox", "create", "dev", "--start"); r.code != 0 {
		t.Fatalf("sandbox create dev --start: %v", r)
	}
	r := a.run("sandbox", "list")
	if r.code != 0 || !regexp.MustCompile(`(?m)^dev +running +alpine:3\.20 +native `).MatchString(r.stdout) {
		t.Errorf("sandbox list: %v", r)
	}
	if r := a.run("exec", "dev", "--", "sh", "-c", "echo $((6*7)) > /root/answer; exit 3"); r.code != 3 {
		t.Errorf("exec's exit status: %v", r)
	}
	// Host to sandbox, sandbox to host.
	writeFiles(t, a.dir, map[string]string{"data.csv": "a,b\n1,2\n"})
	if r := a.run("cp", "./data.csv", "dev:/root/data.csv"); r.code != 0 {
		t.Errorf("cp ./data.csv dev:/root/data.csv: %v", r)
	}
	if r := a.run("exec", "dev", "--", "cat", "/root/data.csv"); r.code != 0 || r.stdout != "a,b\n1,2\n" {
		t.Errorf("the copied file inside: %v", r)
	}
	if r := a.run("cp", "dev:/root/answer", "answer.txt"); r.code != 0 {
		t.Errorf("cp dev:/root/answer answer.txt: %v", r)
	}
	if b, err := os.ReadFile(filepath.Join(a.dir, "answer.txt")); err != nil || string(b) != "42\n" {
		t.Errorf("the file copied out: %q %v", b, err)
	}
	// A tar stream in: 'tar -c ... | agentkernel cp - dev:/srv'.
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	for _, f := range []struct{ name, body string }{{"src/", ""}, {"src/main.txt", "main\n"}, {"src/lib/util.txt", "util\n"}} {
		h := &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg, ModTime: time.Now()}
		if strings.HasSuffix(f.name, "/") {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, f.body)
	}
	tw.Close()
	a.must("exec", "dev", "--", "mkdir", "-p", "/srv")
	a.stdin = in.String()
	r = a.run("cp", "-", "dev:/srv")
	a.stdin = ""
	if r.code != 0 {
		t.Fatalf("cp - dev:/srv: %v", r)
	}
	if r := a.run("exec", "dev", "--", "sh", "-c", "cat /srv/src/main.txt /srv/src/lib/util.txt"); r.code != 0 || r.stdout != "main\nutil\n" {
		t.Errorf("what the tar stream brought in: %v", r)
	}
	// A tar stream out, to stdout: the directory by its base name.
	r = a.run("cp", "dev:/root", "-")
	if r.code != 0 {
		t.Fatalf("cp dev:/root -: %v", r)
	}
	got := map[string]string{}
	tr := tar.NewReader(strings.NewReader(r.stdout))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("cp dev:/root - is not a tar stream: %v", err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(b)
	}
	if got["root/answer"] != "42\n" || got["root/data.csv"] != "a,b\n1,2\n" {
		names := make([]string, 0, len(got))
		for n := range got {
			names = append(names, n)
		}
		sort.Strings(names)
		t.Errorf("cp dev:/root -: %v", names)
	}
	if _, err := os.Lstat(filepath.Join(a.dir, "-")); err == nil {
		t.Error("cp dev:/root - wrote a host file called -")
	}
	// Stopped and started again, what it wrote to its root is kept.
	a.must("sandbox", "stop", "dev")
	a.must("sandbox", "start", "dev")
	if r := a.run("exec", "dev", "--", "cat", "/root/answer", "/srv/src/main.txt"); r.code != 0 || r.stdout != "42\nmain\n" {
		t.Errorf("after stop and start: %v", r)
	}
	a.must("sandbox", "rm", "--force", "dev")
	if r := a.run("exec", "dev", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, `"dev" not found`) {
		t.Errorf("exec in a removed sandbox: %v", r)
	}
}

// loadAs loads the busybox test image (marked with marker) into a's
// cache under ref, as 'docker save' and 'images load' would.
func loadAs(t *testing.T, a *ak, ref, marker string) {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(t.TempDir(), "image.tar")
	if err := tarball.WriteToFile(tarPath, tag, testImage(t, marker)); err != nil {
		t.Fatal(err)
	}
	if r := a.run("images", "load", "-i", tarPath); r.code != 0 {
		t.Fatalf("images load %s: %v", ref, r)
	}
}

// writeFiles writes files (relative names) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for n, c := range files {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// TestDynamicallyLinked builds the same program with and without cgo (or,
// with no C compiler, takes Debian's /bin/true, which links libc) and
// checks that only the static build passes.
func TestDynamicallyLinked(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	// os/user uses cgo when cgo is on, so the cgo build links libc.
	if err := os.WriteFile(src, []byte("package main\n\nimport \"os/user\"\n\nfunc main() { _, _ = user.Current() }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func(name, cgo string) string {
		out := filepath.Join(dir, name)
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", out, src)
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo, "GOFLAGS=")
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build (CGO_ENABLED=%s): %v\n%s", cgo, err, b)
		}
		return out
	}
	static, dynamic := build("static", "0"), "/bin/true"
	if _, err := exec.LookPath("gcc"); err == nil {
		dynamic = build("dynamic", "1")
	}
	if d, err := dynamicallyLinked(static); err != nil || d {
		t.Errorf("static build: dynamic=%v, err=%v; want false, nil", d, err)
	}
	if d, err := dynamicallyLinked(dynamic); err != nil || !d {
		t.Errorf("cgo build: dynamic=%v, err=%v; want true, nil", d, err)
	}
	if _, err := dynamicallyLinked(src); err == nil {
		t.Error("a Go source file read as an ELF executable")
	}
}

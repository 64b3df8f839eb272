package clustercli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSplitRemote(t *testing.T) {
	for _, c := range []struct {
		in, name, path string
		remote         bool
	}{
		{"dev:/tmp/x", "dev", "/tmp/x", true},
		{"./dev:x", "", "./dev:x", false},
		{"/abs/path", "", "/abs/path", false},
		{":x", "", ":x", false},
		{"a/b:c", "", "a/b:c", false},
	} {
		n, p, r := SplitRemote(c.in)
		if n != c.name || p != c.path || r != c.remote {
			t.Errorf("SplitRemote(%q) = %q %q %v", c.in, n, p, r)
		}
	}
	if _, err := CopySides("a", "b"); err == nil {
		t.Error("two local sides accepted")
	}
	if _, err := CopySides("x:a", "y:b"); err == nil {
		t.Error("two sandbox sides accepted")
	}
}

func TestLocalSides(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadLocal(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory as SRC: %v", err)
	}
	big := filepath.Join(dir, "big")
	f, _ := os.Create(big)
	f.Truncate(MaxCopy + 1)
	f.Close()
	if _, err := ReadLocal(big); err == nil {
		t.Error("a file over MaxCopy read")
	}
	if err := WriteLocal(dir, "/tmp/out.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out.txt")); string(b) != "x" {
		t.Errorf("into a directory: %q", b)
	}
	if got := RemoteTarget("/tmp/", "/home/u/a.py"); got != "/tmp/a.py" {
		t.Errorf("RemoteTarget: %s", got)
	}
	if n, err := RunName(); err != nil || !strings.HasPrefix(n, "run-") || len(n) != 14 {
		t.Errorf("RunName: %q %v", n, err)
	}
}

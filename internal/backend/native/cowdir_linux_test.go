package native

import (
	"os"
	"path/filepath"
	"testing"
)

// A persistent sandbox's copy-on-write layer is made once and found
// again at its next start; anything but a directory in its place (a
// symlink planted to send the sandbox's writes elsewhere) is refused.
func TestKeptCowDirs(t *testing.T) {
	dir := t.TempDir()
	upper, work, fresh, err := keptCowDirs(dir, 2)
	if err != nil || !fresh || upper != filepath.Join(dir, "cow2", "upper") || work != filepath.Join(dir, "cow2", "work") {
		t.Fatalf("first: %q %q %v %v", upper, work, fresh, err)
	}
	if err := os.WriteFile(filepath.Join(upper, "kept"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, fresh, err := keptCowDirs(dir, 2); err != nil || fresh {
		t.Fatalf("again: fresh %v, %v", fresh, err)
	}
	if _, err := os.Stat(filepath.Join(upper, "kept")); err != nil {
		t.Errorf("the kept layer lost a file: %v", err)
	}

	elsewhere := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "cow3"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(dir, "cow3", "upper")); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := keptCowDirs(dir, 3); err == nil {
		t.Errorf("a symlinked upper directory was taken")
	}
	if err := os.Symlink(elsewhere, filepath.Join(dir, "cow4")); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := keptCowDirs(dir, 4); err == nil {
		t.Errorf("a symlinked layer directory was taken")
	}
}

package native

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenVolumeSourceComponents: a mount source is opened with no
// symlink followed in any component, by openat2 and by the walk used
// without it; what was opened stays what is mounted, whatever is
// swapped into the path afterwards.
func TestOpenVolumeSourceComponents(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	proj := filepath.Join(base, "proj")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(proj, "sub", "deeper"), filepath.Join(outside, "deeper")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(proj, "link")); err != nil {
		t.Fatal(err)
	}
	sameFile := func(fdPath, want string) bool {
		a, err1 := os.Stat(fdPath)
		b, err2 := os.Stat(want)
		return err1 == nil && err2 == nil && os.SameFile(a, b)
	}
	through := []string{
		filepath.Join(proj, "link"),           // the last component
		filepath.Join(proj, "link", "deeper"), // one in the middle
	}
	for _, p := range through {
		if fd, _, err := openVolumeSource(p); err == nil || !strings.Contains(err.Error(), "symlink") {
			unix.Close(fd)
			t.Errorf("openVolumeSource(%s): %v, want a refusal naming the symlink", p, err)
		}
		if fd, err := openNoSymlinksWalk(p); !errors.Is(err, unix.ELOOP) {
			unix.Close(fd)
			t.Errorf("openNoSymlinksWalk(%s): %v, want ELOOP", p, err)
		}
	}
	for _, p := range []string{"relative/path", proj + "/sub/../link", proj + "/"} {
		if fd, err := openNoSymlinksWalk(p); err == nil {
			unix.Close(fd)
			t.Errorf("openNoSymlinksWalk(%q) opened it", p)
		}
	}
	deeper := filepath.Join(proj, "sub", "deeper")
	fd, err := openNoSymlinksWalk(deeper)
	if err != nil {
		t.Fatal(err)
	}
	if !sameFile("/proc/self/fd/"+strconv.Itoa(fd), deeper) {
		t.Errorf("the walk opened something else than %s", deeper)
	}
	unix.Close(fd)

	// Checked and opened, then swapped: the descriptor's path still
	// names the directory that was checked; a new open refuses the link.
	fd, path, err := openVolumeSource(deeper)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := os.Rename(filepath.Join(proj, "sub"), filepath.Join(base, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(proj, "sub")); err != nil {
		t.Fatal(err)
	}
	if !sameFile(path, filepath.Join(base, "moved", "deeper")) || sameFile(path, filepath.Join(outside, "deeper")) {
		t.Errorf("%s does not name the directory opened before the swap", path)
	}
	if fd2, _, err := openVolumeSource(deeper); err == nil || !strings.Contains(err.Error(), "symlink") {
		unix.Close(fd2)
		t.Errorf("after the swap: %v, want a refusal", err)
	}
}

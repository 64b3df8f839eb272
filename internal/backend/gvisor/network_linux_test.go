package gvisor

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMountPointIn: resolv.conf's and hosts's mount points are made
// inside the image's root only, whatever its symbolic links say.
func TestMountPointIn(t *testing.T) {
	outside := t.TempDir()
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A link that the host would follow out of the root.
	if err := os.Symlink(filepath.Join(outside, "resolv.conf"), filepath.Join(root, "etc/resolv.conf")); err != nil {
		t.Fatal(err)
	}
	if err := mountPointIn(root, "etc/resolv.conf"); err == nil {
		t.Error("a dangling link out of the root was accepted as a mount point")
	}
	if _, err := os.Lstat(filepath.Join(outside, "resolv.conf")); err == nil {
		t.Fatal("a file was created outside the root, through the image's link")
	}
	// Missing: made, as an empty file.
	if err := mountPointIn(root, "etc/hosts"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(root, "etc/hosts")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("etc/hosts: %v %v", fi, err)
	}
	// Present: left alone.
	if err := os.WriteFile(filepath.Join(root, "etc/hosts"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := mountPointIn(root, "etc/hosts"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/hosts")); string(b) != "x" {
		t.Fatalf("an existing file was changed: %q", b)
	}
	// /etc a link out of the root: resolved inside it instead.
	root2 := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root2, "etc")); err != nil {
		t.Fatal(err)
	}
	_ = mountPointIn(root2, "etc/hosts")
	if _, err := os.Lstat(filepath.Join(outside, "hosts")); err == nil {
		t.Fatal("a file was created outside the root, through the image's /etc link")
	}
	// No /etc at all: made.
	root3 := t.TempDir()
	if err := mountPointIn(root3, "etc/resolv.conf"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(root3, "etc/resolv.conf")); err != nil {
		t.Fatal(err)
	}
	// A deeper missing path whose first part is a link out of the root:
	// every directory is made inside the root, none on the host.
	root4 := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root4, "var")); err != nil {
		t.Fatal(err)
	}
	_ = mountPointIn(root4, "var/lib/idle") // refused: the link's target is missing inside the root
	if _, err := os.Lstat(filepath.Join(outside, "lib")); err == nil {
		t.Fatal("a directory was made outside the root, through the image's /var link")
	}
	// A link to a directory inside the root (as /var/run → /run): the
	// missing directories are made there.
	if err := os.Mkdir(filepath.Join(root4, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/run", filepath.Join(root4, "vr")); err != nil {
		t.Fatal(err)
	}
	if err := mountPointIn(root4, "vr/a/b/idle"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(root4, "run/a/b/idle")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("the file was not made inside the root: %v %v", fi, err)
	}
	if err := mountPointIn(root4, "a/../../x"); err == nil {
		t.Error("a path with .. was accepted")
	}
}

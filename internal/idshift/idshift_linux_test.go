package idshift

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestTree: ids of the old block move to the new one, others stay, and
// what chown clears (set-id bits, file capabilities) is kept; a symlink
// is changed itself, not what it points at.
func TestTree(t *testing.T) {
	testenv.RequireRoot(t)
	root := t.TempDir()
	v2 := []byte{0, 0, 0, 2, 0, 0x20, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	files := map[string][2]uint32{ // name → owner, mode
		"su":    {100000, 0o4755},
		"ping":  {100000, 0o755},
		"app":   {101000, 0o644},
		"other": {1000, 0o644},
	}
	for name, f := range files {
		p := filepath.Join(root, name)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, int(f[0]), int(f[0])); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, os.FileMode(f[1]&0o777)|map[bool]os.FileMode{true: os.ModeSetuid}[f[1]&0o4000 != 0]); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Lsetxattr(filepath.Join(root, "ping"), "security.capability", v2, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	_ = os.Lchown(filepath.Join(root, "link"), 100005, 100005)
	var passwd unix.Stat_t
	_ = unix.Stat("/etc/passwd", &passwd)

	if err := Tree(root, 100000, 600000, 65536, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string][2]uint32{"su": {600000, 0o4755}, "ping": {600000, 0o755}, "app": {601000, 0o644}, "other": {1000, 0o644}, "link": {600005, 0o777}}
	for name, w := range want {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(root, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != w[0] || st.Gid != w[0] || st.Mode&0o7777 != w[1] {
			t.Errorf("%s: %d:%d %o, want %d %o", name, st.Uid, st.Gid, st.Mode&0o7777, w[0], w[1])
		}
	}
	buf := make([]byte, 64)
	n, err := unix.Lgetxattr(filepath.Join(root, "ping"), "security.capability", buf)
	if err != nil || !bytes.Equal(buf[:n], v2) {
		t.Errorf("capability: %x %v", buf[:max(n, 0)], err)
	}
	var after unix.Stat_t
	if unix.Stat("/etc/passwd", &after) == nil && (after.Uid != passwd.Uid || after.Gid != passwd.Gid) {
		t.Errorf("the symlink's target changed owner")
	}
	// Again: nothing left to move.
	if err := Tree(root, 100000, 600000, 65536, nil); err != nil {
		t.Fatal(err)
	}
}

package hostidmap

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/backend/native/idrange"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestMount writes through an idmapped clone as host root, as a gofer or
// a rootful container does, and looks at the host's files: root's
// become the owner's, a chown to n lands on Base+n, a set-user-ID file
// cannot run as root (nosuid) and is no longer root's.
func TestMount(t *testing.T) {
	testenv.RequireRoot(t)
	l, err := idrange.Default().Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	o := Owner{UID: 4321, GID: 4322, Base: l.Base}
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	must(t, os.Mkdir(src, 0o755))
	must(t, os.Chown(src, o.UID, o.GID)) // the project's owner's
	must(t, os.WriteFile(filepath.Join(src, "theirs"), []byte("x"), 0o644))
	must(t, os.Chown(filepath.Join(src, "theirs"), 1000, 1000))
	must(t, MountPoint(src, dst))
	if err := Mount(src, dst, o); err != nil {
		testenv.Missing(t, "idmapped mounts on %s: %v", dir, err)
	}
	defer unix.Unmount(dst, unix.MNT_DETACH)

	host := func(name string) (uint32, uint32) {
		t.Helper()
		var st unix.Stat_t
		must(t, unix.Lstat(filepath.Join(src, name), &st))
		return st.Uid, st.Gid
	}
	must(t, os.WriteFile(filepath.Join(dst, "new"), []byte("x"), 0o644))
	if u, g := host("new"); u != 4321 || g != 4322 {
		t.Errorf("a file root created is host %d:%d, want the owner's 4321:4322", u, g)
	}
	must(t, os.WriteFile(filepath.Join(dst, "given"), []byte("x"), 0o644))
	must(t, os.Lchown(filepath.Join(dst, "given"), 1001, 1001))
	if u, g := host("given"); u != l.Base+1001 || g != l.Base+1001 {
		t.Errorf("a chown to 1001 gave host %d:%d, want %d", u, g, l.Base+1001)
	}
	// Inside, the file is 1001's again, and the owner's is root's.
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(dst, "given"), &st))
	if st.Uid != 1001 {
		t.Errorf("through the mount the chowned file is %d's, want 1001", st.Uid)
	}
	must(t, unix.Lstat(filepath.Join(dst, "new"), &st))
	if st.Uid != 0 {
		t.Errorf("through the mount the owner's file is %d's, want 0", st.Uid)
	}
	// Another host user's file shows as nobody. Host root keeps its
	// capabilities over it (it is not the sandbox's user namespace that
	// holds them): a chown to root makes it the owner's, never root's.
	must(t, unix.Lstat(filepath.Join(dst, "theirs"), &st))
	if st.Uid == 1000 || st.Uid == 0 {
		t.Errorf("host user 1000's file shows as %d through the mount, want the overflow id", st.Uid)
	}
	if err := os.Lchown(filepath.Join(dst, "theirs"), 0, 0); err == nil {
		if u, g := host("theirs"); u != 4321 || g != 4322 {
			t.Errorf("a chown to 0 made host user 1000's file host %d:%d, not the owner's", u, g)
		}
	}
	if err := os.Lchown(filepath.Join(dst, "given"), 100000, 100000); err == nil {
		t.Errorf("a chown to an id beyond the block went through")
	}
	var sfs unix.Statfs_t
	must(t, unix.Statfs(dst, &sfs))
	if sfs.Flags&unix.ST_NOSUID == 0 || sfs.Flags&unix.ST_NODEV == 0 {
		t.Errorf("the mount's flags %#x lack nosuid or nodev", sfs.Flags)
	}
}

// TestOwnerCheck refuses an owner whose ids fall in the block.
func TestOwnerCheck(t *testing.T) {
	if err := (Owner{UID: idrange.First + 5, GID: 0, Base: idrange.First}).check(); err == nil {
		t.Error("an owner inside the block was accepted")
	}
	if err := (Owner{UID: 1000, GID: 1000, Base: 1000}).check(); err == nil {
		t.Error("a block below the sandboxes' range was accepted")
	}
	if err := (Owner{UID: 1000, GID: 1000, Base: idrange.First}).check(); err != nil {
		t.Error(err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestMountIn attaches the clone in another process's mount namespace,
// as for an engine daemon that has one of its own: written through that
// namespace the files are the owner's; this namespace never sees the
// mount; unmount takes it away there.
func TestMountIn(t *testing.T) {
	testenv.RequireRoot(t)
	l, err := idrange.Default().Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	o := Owner{UID: 4321, GID: 4322, Base: l.Base}
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	must(t, os.Mkdir(src, 0o755))
	must(t, os.Chown(src, o.UID, o.GID))
	must(t, MountPoint(src, dst))
	other := exec.Command("sleep", "60")
	other.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	must(t, other.Start())
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	unmount, err := MountIn(other.Process.Pid, o, []string{src}, []string{dst})
	if err != nil {
		testenv.Missing(t, "idmapped mounts on %s: %v", dir, err)
	}
	there := fmt.Sprintf("/proc/%d/root%s", other.Process.Pid, dst)
	must(t, os.WriteFile(there+"/new", []byte("x"), 0o644))
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(src, "new"), &st))
	if st.Uid != 4321 || st.Gid != 4322 {
		t.Errorf("written in the other namespace, the file is host %d:%d, want 4321:4322", st.Uid, st.Gid)
	}
	if ents, _ := os.ReadDir(dst); len(ents) != 0 {
		t.Errorf("this namespace sees the mount: %v", ents)
	}
	must(t, unmount())
	if _, err := os.Stat(there + "/new"); err == nil {
		t.Error("the mount is still there after unmount")
	}
}

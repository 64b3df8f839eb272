package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/audit"
	"github.com/agentkernel/agentkernel/internal/image/cache"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

const testBase = 524288 // a sandbox's block of host ids

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func owner(t *testing.T, p string) (uint32, uint32) {
	t.Helper()
	var st unix.Stat_t
	mustDo(t, unix.Lstat(p, &st))
	return st.Uid, st.Gid
}

// writableLayer makes what a sandbox leaves in its writable layer (as
// its block of host ids owns it): a file of a non-root user, a setuid
// file, a whiteout, an opaque directory, a symlink out of the tree, a
// hard link pair, a fifo.
func writableLayer(t *testing.T, dir string) {
	t.Helper()
	mustDo(t, os.MkdirAll(filepath.Join(dir, "home/user"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(dir, "home/user/notes"), []byte("mine\n"), 0o640))
	mustDo(t, os.Lchown(filepath.Join(dir, "home/user/notes"), testBase+1000, testBase+1001))
	mustDo(t, os.Lchown(filepath.Join(dir, "home/user"), testBase+1000, testBase+1000))
	mustDo(t, os.Lchown(filepath.Join(dir, "home"), testBase, testBase))
	mustDo(t, os.Lchown(dir, testBase, testBase))
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	mustDo(t, os.WriteFile(filepath.Join(dir, "big"), big, 0o644))
	mustDo(t, os.WriteFile(filepath.Join(dir, "suid"), []byte("#!/bin/sh\n"), 0o755))
	mustDo(t, os.Lchown(filepath.Join(dir, "suid"), testBase, testBase))
	mustDo(t, unix.Chmod(filepath.Join(dir, "suid"), 0o4755))
	mustDo(t, unix.Mknod(filepath.Join(dir, "gone"), unix.S_IFCHR|0o000, 0))
	mustDo(t, os.Mkdir(filepath.Join(dir, "d"), 0o750))
	mustDo(t, unix.Setxattr(filepath.Join(dir, "d"), "trusted.overlay.opaque", []byte("y"), 0))
	mustDo(t, unix.Setxattr(filepath.Join(dir, "d"), "user.overlay.opaque", []byte("y"), 0))
	mustDo(t, os.WriteFile(filepath.Join(dir, "d/new"), []byte("new\n"), 0o644))
	mustDo(t, os.Symlink("/etc", filepath.Join(dir, "escape")))
	mustDo(t, os.Lchown(filepath.Join(dir, "escape"), testBase+5, testBase+5))
	mustDo(t, os.WriteFile(filepath.Join(dir, "a"), []byte("linked\n"), 0o644))
	mustDo(t, os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "home/b")))
	mustDo(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
}

// checkLayer checks that layer holds writableLayer's tree with its
// owners moved from the sandbox's block to the image's ids (0 up).
func checkLayer(t *testing.T, layer string) {
	t.Helper()
	for p, want := range map[string][2]uint32{"": {0, 0}, "home": {0, 0}, "home/user": {1000, 1000}, "home/user/notes": {1000, 1001}, "suid": {0, 0}, "escape": {5, 5}} {
		if u, g := owner(t, filepath.Join(layer, p)); u != want[0] || g != want[1] {
			t.Errorf("%s: owner %d:%d, want %d:%d", p, u, g, want[0], want[1])
		}
	}
	if fi, err := os.Stat(filepath.Join(layer, "suid")); err != nil || fi.Mode()&os.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("setuid file: %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(layer, "home/user/notes")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("notes mode: %v %v", fi.Mode(), err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(layer, "gone"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("whiteout: mode %o rdev %d %v", st.Mode, st.Rdev, err)
	}
	for _, x := range []string{"trusted.overlay.opaque", "user.overlay.opaque"} {
		buf := make([]byte, 8)
		if n, err := unix.Getxattr(filepath.Join(layer, "d"), x, buf); err != nil || string(buf[:n]) != "y" {
			t.Errorf("opaque mark %s: %q %v", x, buf[:n], err)
		}
	}
	if l, err := os.Readlink(filepath.Join(layer, "escape")); err != nil || l != "/etc" {
		t.Errorf("symlink: %q %v", l, err)
	}
	var a, b unix.Stat_t
	mustDo(t, unix.Lstat(filepath.Join(layer, "a"), &a))
	mustDo(t, unix.Lstat(filepath.Join(layer, "home/b"), &b))
	if a.Ino != b.Ino {
		t.Errorf("hard link pair copied as two files")
	}
	if fi, err := os.Lstat(filepath.Join(layer, "fifo")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("fifo: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(layer, "big")); err != nil || !bytes.Equal(got, bytes.Repeat([]byte("0123456789abcdef"), 1<<16)) {
		t.Errorf("big file's content differs (%d bytes, %v)", len(got), err)
	}
}

// mountsAsLayer mounts layer over base as a read-only overlay and checks
// what the sandbox would see: the whiteout hides base's file, the opaque
// directory hides base's entries.
func mountsAsLayer(t *testing.T, layer string) {
	t.Helper()
	base := t.TempDir()
	mustDo(t, os.WriteFile(filepath.Join(base, "gone"), []byte("x"), 0o644))
	mustDo(t, os.Mkdir(filepath.Join(base, "d"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(base, "d/old"), []byte("x"), 0o644))
	mnt := t.TempDir()
	if err := unix.Mount("overlay", mnt, "overlay", unix.MS_RDONLY, "lowerdir="+layer+":"+base); err != nil {
		testenv.Missing(t, "overlay mount: %v", err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	if _, err := os.Lstat(filepath.Join(mnt, "gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the whiteout did not hide the file below: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(mnt, "d/old")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the opaque directory did not hide the entries below: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "d/new")); err != nil || string(b) != "new\n" {
		t.Errorf("d/new: %q %v", b, err)
	}
}

// TestCopyLayer: a running sandbox's writable layer copied into a layer
// keeps what overlayfs and the sandbox's users need, owners moved to the
// image's ids; the symlink pointing out is copied as a link, never
// followed.
func TestCopyLayer(t *testing.T) {
	testenv.RequireRoot(t)
	src := filepath.Join(t.TempDir(), "upper")
	mustDo(t, os.Mkdir(src, 0o755))
	writableLayer(t, src)
	dst := filepath.Join(t.TempDir(), "layer")
	sh := idShift{from: testBase, to: 0, size: 65536, moves: true}
	if err := copyLayer(src, dst, sh.apply); err != nil {
		t.Fatal(err)
	}
	checkLayer(t, dst)
	if fi, err := os.Lstat(filepath.Join(dst, "escape")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink was not copied as one: %v", err)
	}
	mountsAsLayer(t, dst)
	// The source is untouched.
	if u, _ := owner(t, filepath.Join(src, "home/user/notes")); u != testBase+1000 {
		t.Errorf("source owner changed: %d", u)
	}
	// A source that is a symlink is refused.
	link := filepath.Join(t.TempDir(), "upper")
	mustDo(t, os.Symlink(src, link))
	if err := copyLayer(link, filepath.Join(t.TempDir(), "x"), sh.apply); err == nil {
		t.Errorf("copyLayer followed a symlinked source")
	}
}

func layersOf(t *testing.T, m *Manager, name string) []string {
	t.Helper()
	st, err := m.Store(context.Background())
	mustDo(t, err)
	sb, err := st.Get(context.Background(), name)
	mustDo(t, err)
	var s sandbox.Spec
	mustDo(t, json.Unmarshal(sb.Spec, &s))
	return s.Rootfs.Layers
}

// TestSnapshotStoppedTakeRestoreDelete: a stopped sandbox's snapshot is
// its writable layer, moved (owners to the image's ids) and stacked by
// the sandbox itself; a restore is a new record stacking the same
// layers; bad names, unknown snapshots and sandboxes, taken names are
// refused without changing anything; a deleted snapshot's layer stays
// while a sandbox stacks it and goes with the last one.
func TestSnapshotStoppedTakeRestoreDelete(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := context.Background()
	m := &Manager{DataDir: t.TempDir()}
	defer m.Close()
	base := t.TempDir()
	spec := &sandbox.Spec{Image: "busybox", Rootfs: cache.Rootfs{Layers: []string{base}, IDMap: cache.IDMap{Size: 65536}}}
	mustDo(t, m.Create(ctx, &sandbox.Info{Name: "src", Backend: "native", Image: "busybox"}, spec))
	dir := m.Dir("src")
	mustDo(t, os.MkdirAll(filepath.Join(dir, "upper"), 0o755))
	writableLayer(t, filepath.Join(dir, "upper"))
	mustDo(t, os.WriteFile(filepath.Join(dir, "idrange"), []byte("524288\n"), 0o600))

	snap, err := m.TakeSnapshot(ctx, "src", "s1")
	mustDo(t, err)
	if snap.Name != "s1" || snap.Sandbox != "src" || snap.Layers != 2 || snap.BaseImage != "busybox" {
		t.Errorf("snapshot: %+v", snap)
	}
	if _, err := os.Lstat(filepath.Join(dir, "upper")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stopped sandbox's writable layer was not taken: %v", err)
	}
	layers := layersOf(t, m, "src")
	if len(layers) != 2 || layers[0] != base || !strings.HasPrefix(layers[1], filepath.Join(m.DataDir, "snapshots", "layers")+"/") {
		t.Fatalf("the source's stack: %q", layers)
	}
	checkLayer(t, layers[1])
	if b, err := os.ReadFile(filepath.Join(dir, "spec.json")); err != nil || !strings.Contains(string(b), layers[1]) {
		t.Errorf("spec.json does not stack the layer: %v", err)
	}

	// Refusals change nothing.
	if _, err := m.TakeSnapshot(ctx, "src", "s1"); !errors.Is(err, sandbox.ErrSnapshotExists) {
		t.Errorf("take onto a taken name: %v", err)
	}
	if _, err := m.TakeSnapshot(ctx, "nosuch", "s2"); !errors.Is(err, sandbox.ErrSandboxNotFound) {
		t.Errorf("take of a missing sandbox: %v", err)
	}
	for _, bad := range []string{"../evil", "a/b", "..", "x.json", ""} {
		if _, err := m.TakeSnapshot(ctx, "src", bad); err == nil {
			t.Errorf("snapshot name %q accepted", bad)
		}
		if _, err := m.RestoreSnapshot(ctx, bad, "c"); err == nil {
			t.Errorf("restore of %q accepted", bad)
		}
		if err := m.DeleteSnapshot(ctx, bad); err == nil {
			t.Errorf("delete of %q accepted", bad)
		}
	}
	if _, err := m.RestoreSnapshot(ctx, "nosuch", "c"); !errors.Is(err, sandbox.ErrSnapshotNotFound) {
		t.Errorf("restore of an unknown snapshot: %v", err)
	}
	if err := m.DeleteSnapshot(ctx, "nosuch"); !errors.Is(err, sandbox.ErrSnapshotNotFound) {
		t.Errorf("delete of an unknown snapshot: %v", err)
	}
	if _, err := m.RestoreSnapshot(ctx, "s1", "src"); !errors.Is(err, sandbox.ErrSandboxExists) {
		t.Errorf("restore onto an existing sandbox: %v", err)
	}
	if got := layersOf(t, m, "src"); !reflect.DeepEqual(got, layers) {
		t.Errorf("a refused restore changed the source: %q", got)
	}

	info, err := m.RestoreSnapshot(ctx, "s1", "b")
	mustDo(t, err)
	if info.Name != "b" || info.Status != sandbox.StatusStopped || info.Image != "busybox" {
		t.Errorf("restored: %+v", info)
	}
	if got := layersOf(t, m, "b"); !reflect.DeepEqual(got, layers) {
		t.Errorf("restored stack %q, want %q", got, layers)
	}
	all, err := m.ListSnapshots(ctx)
	if err != nil || len(all) != 1 || all[0].Name != "s1" {
		t.Errorf("list: %v %v", all, err)
	}

	// Deleted while two sandboxes stack its layer: the layer stays.
	mustDo(t, m.DeleteSnapshot(ctx, "s1"))
	if _, err := m.GetSnapshot(ctx, "s1"); !errors.Is(err, sandbox.ErrSnapshotNotFound) {
		t.Errorf("deleted snapshot still found: %v", err)
	}
	if _, err := os.Stat(layers[1]); err != nil {
		t.Fatalf("a layer two sandboxes stack was removed: %v", err)
	}
	mustDo(t, m.Remove(ctx, "b", false))
	if res, err := m.GC(ctx, false); err != nil || strings.Contains(strings.Join(res.Removed, " "), layers[1]) {
		t.Errorf("gc with the source still stacking the layer: %q %v", res.Removed, err)
	}
	mustDo(t, m.Remove(ctx, "src", false))
	if res, err := m.GC(ctx, false); err != nil || !strings.Contains(strings.Join(res.Removed, " "), layers[1]) {
		t.Errorf("gc after the last user: %q %v", res.Removed, err)
	}
	if _, err := os.Stat(layers[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an unused layer stayed: %v", err)
	}
}

// TestSnapshotKilledStoppedTake: a stopped take killed after it moved
// the writable layer but before the sandbox stacked it loses nothing:
// the next gc finishes the move (owners to the image's ids, the layer
// stacked by its sandbox) instead of collecting the layer as nobody's.
func TestSnapshotKilledStoppedTake(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := context.Background()
	m := &Manager{DataDir: t.TempDir()}
	defer m.Close()
	base := t.TempDir()
	spec := &sandbox.Spec{Image: "busybox", Rootfs: cache.Rootfs{Layers: []string{base}, IDMap: cache.IDMap{Size: 65536}}}
	mustDo(t, m.Create(ctx, &sandbox.Info{Name: "k", Backend: "native"}, spec))
	upper := filepath.Join(m.Dir("k"), "upper")
	mustDo(t, os.MkdirAll(upper, 0o755))
	writableLayer(t, upper)
	// What moveStopped had done when it was killed: its record, the rename.
	unlock, err := m.lockSnapshots()
	mustDo(t, err)
	unlock()
	layer := filepath.Join(m.DataDir, "snapshots", "layers", "0123abcd")
	pm, _ := json.Marshal(pendingMove{Sandbox: "k", Layer: layer, From: testBase, To: 0, Size: 65536})
	mustDo(t, os.WriteFile(filepath.Join(m.DataDir, "snapshots", "0123abcd.pending"), pm, 0o600))
	mustDo(t, os.Rename(upper, layer))
	// And one killed before its rename.
	pm, _ = json.Marshal(pendingMove{Sandbox: "k", Layer: filepath.Join(m.DataDir, "snapshots", "layers", "ffff"), Size: 0})
	mustDo(t, os.WriteFile(filepath.Join(m.DataDir, "snapshots", "ffff.pending"), pm, 0o600))

	if res, err := m.GC(ctx, false); err != nil || strings.Contains(strings.Join(res.Removed, " "), layer) {
		t.Fatalf("gc: %q %v", res.Removed, err)
	}
	if got := layersOf(t, m, "k"); !reflect.DeepEqual(got, []string{base, layer}) {
		t.Errorf("the sandbox's stack after recovery: %q", got)
	}
	checkLayer(t, layer)
	if left, _ := filepath.Glob(filepath.Join(m.DataDir, "snapshots", "*.pending")); len(left) != 0 {
		t.Errorf("records left: %q", left)
	}
}

// TestSnapshotStoppedTakeVolume: a stopped take moves the writable
// layer of each copy-on-write volume too, stacks it in the sandbox's
// spec over the volume's host directory (Mounts[i].Layers) and records
// it in the snapshot; owners move from the sandbox's block to the ids
// the sandbox sees (no shift); a restore stacks the same layers; a
// take killed after the volume's rename is finished by the next gc
// into the same place; the layers stay while a sandbox stacks them.
func TestSnapshotStoppedTakeVolume(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := context.Background()
	m := &Manager{DataDir: t.TempDir()}
	defer m.Close()
	base, project := t.TempDir(), t.TempDir()
	spec := &sandbox.Spec{Image: "busybox", Rootfs: cache.Rootfs{Layers: []string{base}, IDMap: cache.IDMap{Size: 65536}},
		Mounts: []sandbox.Mount{{Kind: sandbox.MountBind, Source: t.TempDir(), Dest: "/data"},
			{Kind: sandbox.MountCopyOnWrite, Source: project, Dest: "/workspace"}}}
	mustDo(t, m.Create(ctx, &sandbox.Info{Name: "v", Backend: "native"}, spec))
	dir := m.Dir("v")
	mustDo(t, os.MkdirAll(filepath.Join(dir, "upper"), 0o755))
	cow := filepath.Join(dir, "cow1", "upper")
	mustDo(t, os.MkdirAll(cow, 0o755))
	mustDo(t, os.WriteFile(filepath.Join(cow, "edit"), []byte("e\n"), 0o644))
	mustDo(t, os.Lchown(filepath.Join(cow, "edit"), testBase+1000, testBase+1001))
	mustDo(t, os.WriteFile(filepath.Join(dir, "idrange"), []byte(strconv.Itoa(testBase)+"\n"), 0o600))

	if _, err := m.TakeSnapshot(ctx, "v", "vs"); err != nil {
		t.Fatal(err)
	}
	specOf := func(name string) sandbox.Spec {
		st, err := m.Store(ctx)
		mustDo(t, err)
		sb, err := st.Get(ctx, name)
		mustDo(t, err)
		var s sandbox.Spec
		mustDo(t, json.Unmarshal(sb.Spec, &s))
		return s
	}
	got := specOf("v")
	if len(got.Mounts[0].Layers) != 0 || len(got.Mounts[1].Layers) != 1 || len(got.Rootfs.Layers) != 2 {
		t.Fatalf("the sandbox's stacks after the take: root %q, mounts %+v", got.Rootfs.Layers, got.Mounts)
	}
	layer := got.Mounts[1].Layers[0]
	var st unix.Stat_t
	mustDo(t, unix.Lstat(filepath.Join(layer, "edit"), &st))
	if st.Uid != 1000 || st.Gid != 1001 {
		t.Errorf("the volume layer's file is owned by %d:%d, want 1000:1001", st.Uid, st.Gid)
	}
	if _, err := os.Stat(cow); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the volume's writable layer is still in place: %v", err)
	}
	mustDo(t, func() error { _, err := m.RestoreSnapshot(ctx, "vs", "vr"); return err }())
	if r := specOf("vr"); !reflect.DeepEqual(r.Mounts, got.Mounts) || !reflect.DeepEqual(r.Rootfs.Layers, got.Rootfs.Layers) {
		t.Errorf("the restored sandbox stacks %q and %+v, the source %q and %+v", r.Rootfs.Layers, r.Mounts, got.Rootfs.Layers, got.Mounts)
	}

	// A second take killed after it renamed the volume's layer.
	mustDo(t, os.MkdirAll(cow, 0o755))
	mustDo(t, os.WriteFile(filepath.Join(cow, "later"), []byte("l\n"), 0o644))
	killed := filepath.Join(m.DataDir, "snapshots", "layers", "0123abcd")
	one := 1
	pm, _ := json.Marshal(pendingMove{Sandbox: "v", Layer: killed, Mount: &one})
	mustDo(t, os.WriteFile(filepath.Join(m.DataDir, "snapshots", "0123abcd.pending"), pm, 0o600))
	mustDo(t, os.Rename(cow, killed))
	if res, err := m.GC(ctx, false); err != nil || strings.Contains(strings.Join(res.Removed, " "), killed) {
		t.Fatalf("gc: %q %v", res.Removed, err)
	}
	if got := specOf("v").Mounts[1].Layers; !reflect.DeepEqual(got, []string{layer, killed}) {
		t.Errorf("the volume's stack after recovery: %q", got)
	}
	// Deleted, removed: the layers go with their last user.
	mustDo(t, m.DeleteSnapshot(ctx, "vs"))
	if _, err := os.Stat(layer); err != nil {
		t.Errorf("a volume layer two sandboxes stack was removed: %v", err)
	}
	mustDo(t, m.Remove(ctx, "v", false))
	mustDo(t, m.Remove(ctx, "vr", false))
	if _, err := m.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(m.DataDir, "snapshots", "layers", "*")); len(left) != 0 {
		t.Errorf("layers left: %q", left)
	}
}

// TestSnapshotExportHoldsSnapshot: while an export reads a snapshot's
// layers (through sandbox.Manager over this mechanism), a delete of the
// snapshot waits, so the layers the export reads stay; the delete then
// finishes and removes them; the export and the delete are audited.
func TestSnapshotExportHoldsSnapshot(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := context.Background()
	sv := &Manager{DataDir: t.TempDir()}
	defer sv.Close()
	log := audit.New(sv.DataDir)
	m := sandbox.NewManager(sandbox.ManagerOptions{Store: sv, Audit: log, Who: "test", Warn: func(f string, a ...any) { t.Errorf(f, a...) }})
	spec := &sandbox.Spec{Image: "busybox", Rootfs: cache.Rootfs{Layers: []string{t.TempDir()}, IDMap: cache.IDMap{Size: 65536}}}
	mustDo(t, sv.Create(ctx, &sandbox.Info{Name: "src", Backend: "native", Image: "busybox"}, spec))
	dir := sv.Dir("src")
	mustDo(t, os.MkdirAll(filepath.Join(dir, "upper"), 0o755))
	writableLayer(t, filepath.Join(dir, "upper"))
	mustDo(t, os.WriteFile(filepath.Join(dir, "idrange"), []byte("524288\n"), 0o600))
	if _, err := m.TakeSnapshot(ctx, "src", "s1"); err != nil {
		t.Fatal(err)
	}
	// Only the snapshot stacks its layer now: a delete removes it.
	mustDo(t, sv.Remove(ctx, "src", false))

	exporting, finish := make(chan string), make(chan struct{})
	exported := make(chan error, 1)
	go func() {
		exported <- m.ExportSnapshot(ctx, "s1", "img:1", func(_ context.Context, snap *sandbox.Snapshot, spec *sandbox.Spec) error {
			exporting <- spec.Rootfs.Layers[len(spec.Rootfs.Layers)-1]
			<-finish
			return nil
		})
	}()
	layer := <-exporting
	deleted := make(chan error, 1)
	go func() { deleted <- m.DeleteSnapshot(ctx, "s1") }()
	select {
	case err := <-deleted:
		t.Fatalf("the delete did not wait for the export (%v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := os.Stat(filepath.Join(layer, "home", "user", "notes")); err != nil {
		t.Errorf("the exported layer changed under the export: %v", err)
	}
	close(finish)
	if err := <-exported; err != nil {
		t.Fatal(err)
	}
	if err := <-deleted; err != nil {
		t.Fatalf("delete after the export: %v", err)
	}
	if _, err := os.Stat(layer); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted snapshot's layer stayed: %v", err)
	}
	if err := m.ExportSnapshot(ctx, "s1", "img:1", func(context.Context, *sandbox.Snapshot, *sandbox.Spec) error {
		t.Error("export of a deleted snapshot ran")
		return nil
	}); !errors.Is(err, sandbox.ErrSnapshotNotFound) {
		t.Errorf("export of a deleted snapshot: %v", err)
	}
	entries, err := log.Read(audit.Filter{})
	mustDo(t, err)
	var got []string
	for _, e := range entries {
		got = append(got, e.Action+" "+e.Sandbox+" "+e.Details)
	}
	if want := []string{"snapshot src snapshot s1", "snapshot_export src snapshot s1 to img:1", "snapshot_delete s1 "}; !reflect.DeepEqual(got, want) {
		t.Errorf("audit entries:\n%q\nwant\n%q", got, want)
	}
}

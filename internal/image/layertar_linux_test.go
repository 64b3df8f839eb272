//go:build linux

package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// capV3 is a v3 file capability (CAP_NET_RAW permitted) for the user
// namespace whose root is host uid root.
func capV3(root uint32) []byte {
	b := make([]byte, vfsCapSize3)
	binary.LittleEndian.PutUint32(b, vfsCapRevision3)
	binary.LittleEndian.PutUint32(b[4:], 1<<13)
	binary.LittleEndian.PutUint32(b[vfsCapSize2:], root)
	return b
}

// overlayLayer makes a layer directory as overlayfs leaves a writable
// layer, owners stored shifted by 100000: whiteouts, an opaque
// directory, the overlay's own xattrs, a set-uid file, hard links, a
// symlink out of the layer, a FIFO, file capabilities for the image's
// root and for another.
func overlayLayer(t *testing.T) (string, IDMap) {
	t.Helper()
	testenv.RequireRoot(t)
	const base = 100000
	m := IDMap{UID: base, GID: base, Size: 65536}
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	p := func(n string) string { return filepath.Join(dir, n) }
	must(os.MkdirAll(p("etc"), 0o755))
	must(os.MkdirAll(p("home/opaque"), 0o750))
	must(os.WriteFile(p("home/opaque/kept"), []byte("kept"), 0o644))
	must(unix.Setxattr(p("home/opaque"), "trusted.overlay.opaque", []byte("y"), 0))
	must(unix.Setxattr(p("home/opaque"), "user.note", []byte("n"), 0))
	must(unix.Mknod(p("etc/gone"), unix.S_IFCHR, 0))
	must(unix.Mknod(p("gonedir"), unix.S_IFCHR, 0))
	must(os.WriteFile(p("etc/suid"), []byte("#!/bin/sh\n"), 0o755))
	must(os.WriteFile(p("etc/hl1"), []byte("hl"), 0o644))
	must(os.Link(p("etc/hl1"), p("etc/hl2")))
	must(os.Symlink("/etc/shadow", p("etc/link")))
	must(unix.Mkfifo(p("etc/fifo"), 0o600))
	must(os.WriteFile(p("etc/cap"), []byte("c"), 0o755))
	must(os.WriteFile(p("etc/othercap"), []byte("c"), 0o755))
	must(unix.Setxattr(p("etc/hl1"), "trusted.overlay.origin", []byte("x"), 0))
	must(os.WriteFile(p("etc/user1000"), []byte("u"), 0o640))
	for n, id := range map[string]int{"etc": 0, "home": 0, "home/opaque": 1000, "home/opaque/kept": 1000, "etc/suid": 0, "etc/hl1": 0, "etc/cap": 0, "etc/othercap": 0, "etc/fifo": 0, "etc/user1000": 1000} {
		must(os.Lchown(p(n), base+id, base+id+1))
	}
	must(os.Lchown(p("etc/link"), 7, 7)) // outside the map
	must(unix.Chmod(p("etc/suid"), 0o4755))
	// After the chown, which clears file capabilities.
	must(unix.Setxattr(p("etc/cap"), "security.capability", capV3(base), 0))
	must(unix.Setxattr(p("etc/othercap"), "security.capability", capV3(base+70000), 0))
	return dir, m
}

func readLayer(t *testing.T, b []byte) map[string]*tar.Header {
	t.Helper()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(h.Name, "/")] = h
	}
}

// TestWriteLayerTar: overlayfs' whiteouts and opaque marks become OCI
// entries, owners go back to the image's ids (outside the map: the
// overflow id), set-id bits and hard links stay, the overlay's xattrs
// go, a file capability stays (v2) only for the image's root; two
// writes give the same bytes; and the store's extractor unpacks the tar
// back into the same layer.
func TestWriteLayerTar(t *testing.T) {
	dir, m := overlayLayer(t)
	var b1, b2 bytes.Buffer
	if err := writeLayerTar(context.Background(), dir, &b1, layerTarOptions{idmap: m}); err != nil {
		t.Fatal(err)
	}
	if err := writeLayerTar(context.Background(), dir, &b2, layerTarOptions{idmap: m}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b1.Bytes(), b2.Bytes()) {
		t.Errorf("two writes of one layer differ")
	}
	hs := readLayer(t, b1.Bytes())
	for _, n := range []string{"etc/.wh.gone", ".wh.gonedir", "home/opaque/.wh..wh..opq", "home/opaque/kept"} {
		if hs[n] == nil {
			t.Errorf("no %s in %v", n, keys(hs))
		}
	}
	for _, n := range []string{"etc/gone", "gonedir"} {
		if hs[n] != nil {
			t.Errorf("%s written as a device: %+v", n, hs[n])
		}
	}
	check := func(n string, uid, gid int, mode int64) {
		t.Helper()
		h := hs[n]
		if h == nil || h.Uid != uid || h.Gid != gid || (mode >= 0 && h.Mode != mode) {
			t.Errorf("%s: %+v, want %d:%d %o", n, h, uid, gid, mode)
		}
	}
	check("etc/suid", 0, 1, 0o4755)
	check("home/opaque", 1000, 1001, 0o750)
	check("etc/user1000", 1000, 1001, 0o640)
	check("etc/link", 65534, 65534, -1)
	if h := hs["etc/link"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/etc/shadow" {
		t.Errorf("symlink: %+v", h)
	}
	if h := hs["etc/hl2"]; h == nil || h.Typeflag != tar.TypeLink || h.Linkname != "etc/hl1" {
		t.Errorf("hard link: %+v", h)
	}
	if h := hs["etc/fifo"]; h == nil || h.Typeflag != tar.TypeFifo {
		t.Errorf("fifo: %+v", h)
	}
	for n, h := range hs {
		for k := range h.PAXRecords {
			if strings.Contains(k, "overlay.") {
				t.Errorf("%s carries %s", n, k)
			}
		}
	}
	if v := hs["home/opaque"].PAXRecords[paxXattr+"user.note"]; v != "n" {
		t.Errorf("user xattr: %q", v)
	}
	if v := hs["etc/cap"].PAXRecords[paxXattr+"security.capability"]; len(v) != vfsCapSize2 || binary.LittleEndian.Uint32([]byte(v))&vfsCapRevisionMask != vfsCapRevision2 {
		t.Errorf("capability of the image's root: %x", v)
	}
	if _, ok := hs["etc/othercap"].PAXRecords[paxXattr+"security.capability"]; ok {
		t.Errorf("a capability of another namespace's root was kept")
	}

	// Back through the store's extractor, with the same map.
	back := t.TempDir()
	if _, err := extractTar(context.Background(), bytes.NewReader(b1.Bytes()), back, privilegedExtract(m)); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	for _, n := range []string{"etc/gone", "gonedir"} {
		if err := unix.Lstat(filepath.Join(back, n), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
			t.Errorf("%s unpacked: %v %+v", n, err, st)
		}
	}
	if v, ok := getxattr(t, filepath.Join(back, "home/opaque"), "trusted.overlay.opaque"); !ok || v != "y" {
		t.Errorf("opaque mark unpacked: %q", v)
	}
	if err := unix.Lstat(filepath.Join(back, "etc/suid"), &st); err != nil || st.Uid != m.UID || st.Mode&0o7777 != 0o4755 {
		t.Errorf("etc/suid unpacked: %v %+v", err, st)
	}
	var again bytes.Buffer
	if err := writeLayerTar(context.Background(), back, &again, layerTarOptions{idmap: m}); err != nil {
		t.Fatal(err)
	}
	if b := readLayer(t, again.Bytes()); len(b) != len(hs) {
		t.Errorf("the unpacked layer writes %v, the layer %v", keys(b), keys(hs))
	}
}

// TestWriteLayerTarRefuses: a file named like a whiteout (it would be
// read back as a deletion of a lower file) and an overlayfs redirect
// (the directory's content is elsewhere) are refused, naming the file;
// nothing is followed out of the layer.
func TestWriteLayerTarRefuses(t *testing.T) {
	testenv.RequireRoot(t)
	for name, mk := range map[string]func(dir string) error{
		"etc/.wh.passwd": func(dir string) error {
			if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, "etc/.wh.passwd"), nil, 0o644)
		},
		".wh..wh..opq": func(dir string) error {
			return os.WriteFile(filepath.Join(dir, ".wh..wh..opq"), nil, 0o644)
		},
		"moved": func(dir string) error {
			if err := os.Mkdir(filepath.Join(dir, "moved"), 0o755); err != nil {
				return err
			}
			return unix.Setxattr(filepath.Join(dir, "moved"), "trusted.overlay.redirect", []byte("/orig"), 0)
		},
	} {
		dir := t.TempDir()
		if err := mk(dir); err != nil {
			t.Fatal(err)
		}
		err := writeLayerTar(context.Background(), dir, io.Discard, layerTarOptions{})
		if !errors.Is(err, ErrNotExportable) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The layer directory itself may not be a symlink.
	dir := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	if err := writeLayerTar(context.Background(), filepath.Join(dir, "l"), io.Discard, layerTarOptions{}); err == nil {
		t.Errorf("a symlinked layer directory was followed")
	}
}

func keys(m map[string]*tar.Header) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestWriteLayerTarRootless: a rootless sandbox's layer goes back to
// the sandbox's ids: the caller's are root, its subordinate range 1…,
// an id of neither the overflow id.
func TestWriteLayerTarRootless(t *testing.T) {
	testenv.RequireRoot(t) // to make files of other owners
	dir := t.TempDir()
	for n, id := range map[string]int{"own": 1234, "sub": 200000 + 999, "other": 7} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(filepath.Join(dir, n), id, id); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	o := layerTarOptions{rootless: true, ownerUID: 1234, ownerGID: 1234, sub: subRanges{uidStart: 200000, uidCount: 65535, gidStart: 200000, gidCount: 65535}}
	if err := writeLayerTar(context.Background(), dir, &b, o); err != nil {
		t.Fatal(err)
	}
	hs := readLayer(t, b.Bytes())
	for n, want := range map[string]int{"own": 0, "sub": 1000, "other": 65534} {
		if h := hs[n]; h == nil || h.Uid != want || h.Gid != want {
			t.Errorf("%s: %+v, want %d", n, h, want)
		}
	}
}

//go:build linux

package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/image/imagetest"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// jail is a layer root with things around it that no layer may touch:
// <outer>/root is where the layer goes, <outer>/secret and
// <outer>/outside/passwd are bait.
type jail struct {
	outer, root string
}

const bait = "original"

func newJail(t testing.TB) jail {
	t.Helper()
	outer := t.TempDir()
	j := jail{outer: outer, root: filepath.Join(outer, "root")}
	for _, d := range []string{j.root, filepath.Join(outer, "outside")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"secret", "outside/passwd"} {
		if err := os.WriteFile(filepath.Join(outer, f), []byte(bait), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = removeAll(j.root) })
	return j
}

// check fails the test if anything outside the layer root changed.
func (j jail) check(t testing.TB) {
	t.Helper()
	var names []string
	entries, err := os.ReadDir(j.outer)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if got := strings.Join(names, ","); got != "outside,root,secret" {
		t.Fatalf("entries next to the layer root: %s", got)
	}
	out, err := os.ReadDir(filepath.Join(j.outer, "outside"))
	if err != nil || len(out) != 1 || out[0].Name() != "passwd" {
		t.Fatalf("outside/ changed: %v %v", out, err)
	}
	for _, f := range []string{"secret", "outside/passwd"} {
		p := filepath.Join(j.outer, f)
		data, err := os.ReadFile(p)
		if err != nil || string(data) != bait {
			t.Fatalf("%s changed: %q %v", f, data, err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Nlink != 1 {
			t.Fatalf("%s gained a hard link (nlink %d)", f, st.Nlink)
		}
		if st.Mode&0o7777 != 0o644 {
			t.Fatalf("%s mode changed: %o", f, st.Mode&0o7777)
		}
	}
}

func (j jail) extract(t testing.TB, opts extractOptions, files ...imagetest.File) (extractStats, error) {
	t.Helper()
	return extractTar(context.Background(), bytes.NewReader(imagetest.TarBytes(t, files...)), j.root, opts)
}

func (j jail) in(p string) string { return filepath.Join(j.root, p) }

func isRoot() bool { return os.Geteuid() == 0 }

// rootOpts is what a root store uses, without devices (tests must not
// litter /tmp with device nodes they did not ask for).
func rootOpts() extractOptions {
	if !isRoot() {
		return extractOptions{}
	}
	o := privilegedExtract(IDMap{})
	o.devices = false
	return o
}

func TestCleanName(t *testing.T) {
	for in, want := range map[string]string{
		"a/b": "a/b", "./a/b/": "a/b", "/abs/x": "abs/x", "a/../b": "b", "//x//y": "x/y", ".": "", "./": "", "/": "",
	} {
		got, err := cleanName(in)
		if err != nil || got != want {
			t.Errorf("cleanName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"..", "../x", "a/../../x", "./../x", "a/b/../../../x", "x\x00y"} {
		if got, err := cleanName(in); err == nil {
			t.Errorf("cleanName(%q) = %q, want an error", in, got)
		}
	}
}

func TestEscapeDotDot(t *testing.T) {
	for _, name := range []string{"../secret", "a/../../secret", "./../outside/passwd", "../root2/x"} {
		t.Run(name, func(t *testing.T) {
			j := newJail(t)
			_, err := j.extract(t, rootOpts(), imagetest.Reg(name, "pwned"))
			if err == nil {
				t.Fatal("no error for an escaping name")
			}
			j.check(t)
		})
	}
}

func TestEscapeAbsoluteName(t *testing.T) {
	j := newJail(t)
	abs := filepath.Join(j.outer, "secret")
	if _, err := j.extract(t, rootOpts(), imagetest.Reg(abs, "pwned")); err != nil {
		t.Fatal(err)
	}
	j.check(t)
	// The absolute name is taken relative to the layer root.
	if data, err := os.ReadFile(j.in(abs)); err != nil || string(data) != "pwned" {
		t.Fatalf("contained file: %q %v", data, err)
	}
}

func TestEscapeSymlinkDirThenWrite(t *testing.T) {
	for _, target := range []string{"OUTER/outside", "../outside", "../../../../outside", "/", "/.."} {
		t.Run(target, func(t *testing.T) {
			j := newJail(t)
			target := strings.Replace(target, "OUTER", j.outer, 1)
			_, err := j.extract(t, rootOpts(),
				imagetest.Symlink("evil", target),
				imagetest.Reg("evil/passwd", "pwned"),
			)
			j.check(t)
			if err == nil {
				// Contained: the write landed inside the root.
				if _, err := os.Stat(filepath.Join(j.root, "evil")); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestSymlinkDirInsideRootIsFollowedInside(t *testing.T) {
	j := newJail(t)
	_, err := j.extract(t, rootOpts(),
		imagetest.Dir("etc"),
		imagetest.Symlink("link", "/etc"),
		imagetest.Reg("link/passwd", "inside"),
	)
	if err != nil {
		t.Fatal(err)
	}
	j.check(t)
	if data, err := os.ReadFile(j.in("etc/passwd")); err != nil || string(data) != "inside" {
		t.Fatalf("etc/passwd: %q %v", data, err)
	}
}

func TestEscapeSymlinkThenOverwrite(t *testing.T) {
	j := newJail(t)
	_, err := j.extract(t, rootOpts(),
		imagetest.Symlink("link", filepath.Join(j.outer, "outside/passwd")),
		imagetest.Reg("link", "pwned"),
		imagetest.Symlink("rel", "../secret"),
		imagetest.Reg("rel", "pwned"),
	)
	if err != nil {
		t.Fatal(err)
	}
	j.check(t)
	for _, n := range []string{"link", "rel"} {
		fi, err := os.Lstat(j.in(n))
		if err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("%s should have replaced the symlink: %v %v", n, fi, err)
		}
	}
}

func TestEscapeHardlinkOutside(t *testing.T) {
	for _, link := range []string{"../outside/passwd", "../secret", "OUTER/secret", "/../secret"} {
		t.Run(link, func(t *testing.T) {
			j := newJail(t)
			link := strings.Replace(link, "OUTER", j.outer, 1)
			_, err := j.extract(t, rootOpts(), imagetest.Hardlink("h", link))
			if err == nil {
				t.Fatal("hard link to a file outside the layer succeeded")
			}
			j.check(t)
		})
	}
}

func TestEscapeHardlinkThroughSymlinkedDir(t *testing.T) {
	j := newJail(t)
	_, err := j.extract(t, rootOpts(),
		imagetest.Symlink("d", filepath.Join(j.outer, "outside")),
		imagetest.Hardlink("x", "d/passwd"),
	)
	if err == nil {
		t.Fatal("hard link through a symlink to outside succeeded")
	}
	j.check(t)
}

func TestEscapeHardlinkToSymlinkThenWrite(t *testing.T) {
	j := newJail(t)
	_, err := j.extract(t, rootOpts(),
		imagetest.Symlink("s", filepath.Join(j.outer, "secret")),
		imagetest.Hardlink("h", "s"),
		imagetest.Reg("h", "pwned"),
		imagetest.Reg("s", "pwned"),
	)
	if err != nil {
		t.Fatal(err)
	}
	j.check(t)
}

func TestEscapeSymlinkChainAndLoop(t *testing.T) {
	j := newJail(t)
	_, _ = j.extract(t, rootOpts(),
		imagetest.Symlink("a", "b"),
		imagetest.Symlink("b", "c/../../.."),
		imagetest.Dir("c"),
		imagetest.Reg("a/secret", "pwned"),
	)
	j.check(t)
	j2 := newJail(t)
	_, err := j2.extract(t, rootOpts(),
		imagetest.Symlink("loop", "loop"),
		imagetest.Reg("loop/x", "pwned"),
	)
	if err == nil {
		t.Fatal("write through a symlink loop succeeded")
	}
	j2.check(t)
}

func TestEscapeProcMagicLink(t *testing.T) {
	j := newJail(t)
	_, _ = j.extract(t, rootOpts(),
		imagetest.Symlink("p", "/proc/self/cwd"),
		imagetest.Reg("p/pwned", "pwned"),
		imagetest.Symlink("q", "/proc/self/root"+j.outer),
		imagetest.Reg("q/secret", "pwned"),
	)
	j.check(t)
	if _, err := os.Stat("pwned"); err == nil {
		t.Fatal("wrote into the test's working directory")
	}
}

func TestEscapeWhiteoutNames(t *testing.T) {
	for _, name := range []string{"../.wh.secret", ".wh..", "../.wh..wh..opq", "a/../../.wh.outside"} {
		t.Run(name, func(t *testing.T) {
			j := newJail(t)
			_, err := j.extract(t, rootOpts(), imagetest.Reg(name, ""))
			if err == nil {
				t.Fatal("no error")
			}
			j.check(t)
		})
	}
	// Whiteouts under a symlink to outside stay inside.
	j := newJail(t)
	_, _ = j.extract(t, rootOpts(),
		imagetest.Symlink("o", filepath.Join(j.outer, "outside")),
		imagetest.Reg("o/.wh.passwd", ""),
		imagetest.Reg("o/.wh..wh..opq", ""),
	)
	j.check(t)
}

func TestDevicesSkippedUnprivileged(t *testing.T) {
	j := newJail(t)
	opts := rootOpts()
	opts.devices = false
	st, err := j.extract(t, opts,
		imagetest.File{Name: "null", Type: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666},
		imagetest.File{Name: "sda", Type: tar.TypeBlock, Devmajor: 8, Devminor: 0, Mode: 0o666},
		imagetest.File{Name: "fifo", Type: tar.TypeFifo, Mode: 0o600},
	)
	if err != nil {
		t.Fatal(err)
	}
	if st.SkippedDevices != 2 {
		t.Fatalf("skipped devices = %d, want 2", st.SkippedDevices)
	}
	for _, n := range []string{"null", "sda"} {
		if _, err := os.Lstat(j.in(n)); err == nil {
			t.Fatalf("%s was created", n)
		}
	}
	if fi, err := os.Lstat(j.in("fifo")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("fifo: %v %v", fi, err)
	}
	j.check(t)
}

func TestDevicesPrivileged(t *testing.T) {
	testenv.RequireRoot(t)
	j := newJail(t)
	st, err := j.extract(t, privilegedExtract(IDMap{}),
		imagetest.File{Name: "dev/null", Type: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666},
	)
	if err != nil {
		t.Fatal(err)
	}
	var s unix.Stat_t
	if err := unix.Lstat(j.in("dev/null"), &s); err != nil {
		t.Fatal(err)
	}
	if s.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(s.Rdev) != 1 || unix.Minor(s.Rdev) != 3 || s.Mode&0o777 != 0o666 {
		t.Fatalf("dev/null: mode %o rdev %d:%d", s.Mode, unix.Major(s.Rdev), unix.Minor(s.Rdev))
	}
	if st.Devices != 1 {
		t.Fatalf("devices = %d", st.Devices)
	}
}

func getxattr(t testing.TB, p, name string) (string, bool) {
	t.Helper()
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(p, name, buf)
	if err != nil {
		return "", false
	}
	return string(buf[:n]), true
}

func isWhiteout(t testing.TB, p string) bool {
	t.Helper()
	var s unix.Stat_t
	if err := unix.Lstat(p, &s); err != nil {
		return false
	}
	return s.Mode&unix.S_IFMT == unix.S_IFCHR && s.Rdev == 0
}

func TestWhiteoutsOverlayForm(t *testing.T) {
	j := newJail(t)
	st, err := j.extract(t, rootOpts(),
		imagetest.Whiteout("gone"),
		imagetest.Whiteout("sub/gone2"),
		imagetest.Opaque("opq"),
		imagetest.Reg("opq/new", "x"),
		imagetest.Reg("kept", "mine"),
		imagetest.Whiteout("kept"), // same layer: the file stays
		imagetest.Whiteout("dirnow"),
		imagetest.Dir("dirnow"), // replaces the whiteout: must become opaque
		imagetest.Reg(".wh..wh.plnk", ""),
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"gone", "sub/gone2"} {
		if !isWhiteout(t, j.in(p)) {
			t.Errorf("%s is not a 0/0 character device", p)
		}
	}
	if data, _ := os.ReadFile(j.in("kept")); string(data) != "mine" {
		t.Errorf("kept = %q", data)
	}
	for _, d := range []string{"opq", "dirnow"} {
		if v, ok := getxattr(t, j.in(d), "user.overlay.opaque"); !ok || v != "y" {
			t.Errorf("%s: user.overlay.opaque = %q %v", d, v, ok)
		}
		if isRoot() {
			if v, ok := getxattr(t, j.in(d), "trusted.overlay.opaque"); !ok || v != "y" {
				t.Errorf("%s: trusted.overlay.opaque = %q %v", d, v, ok)
			}
		}
	}
	if _, err := os.Lstat(j.in(".wh..wh.plnk")); err == nil {
		t.Error("AUFS metadata was written")
	}
	if st.Whiteouts != 3 || st.Opaques != 1 {
		t.Errorf("stats: %+v", st)
	}
	j.check(t)
}

func TestXattrPolicy(t *testing.T) {
	j := newJail(t)
	st, err := j.extract(t, rootOpts(),
		imagetest.File{Name: "f", Body: "x", Xattrs: map[string]string{
			"user.keep":                "yes",
			"user.overlay.opaque":      "y",
			"trusted.overlay.redirect": "/etc",
			"trusted.overlay.metacopy": "",
			"security.selinux":         "system_u:object_r:shadow_t:s0",
			"system.posix_acl_access":  "\x02\x00\x00\x00",
		}},
		imagetest.File{Name: "d", Type: tar.TypeDir, Xattrs: map[string]string{"user.d": "1", "trusted.overlay.opaque": "y"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := getxattr(t, j.in("f"), "user.keep"); !ok || v != "yes" {
		t.Errorf("user.keep = %q %v", v, ok)
	}
	if v, ok := getxattr(t, j.in("d"), "user.d"); !ok || v != "1" {
		t.Errorf("user.d = %q %v", v, ok)
	}
	for _, x := range []string{"user.overlay.opaque", "trusted.overlay.redirect", "trusted.overlay.metacopy", "security.selinux"} {
		if _, ok := getxattr(t, j.in("f"), x); ok {
			t.Errorf("%s was set", x)
		}
	}
	if _, ok := getxattr(t, j.in("d"), "trusted.overlay.opaque"); ok {
		t.Error("an image set trusted.overlay.opaque itself")
	}
	if st.SkippedXattrs != 6 {
		t.Errorf("skipped xattrs = %d, want 6", st.SkippedXattrs)
	}
}

func TestCapabilityShift(t *testing.T) {
	v2 := make([]byte, vfsCapSize2)
	binary.LittleEndian.PutUint32(v2, vfsCapRevision2|1)
	binary.LittleEndian.PutUint32(v2[4:], 1<<10) // CAP_NET_BIND_SERVICE permitted
	got, ok := shiftCapability(v2, 100000)
	if !ok || len(got) != vfsCapSize3 || binary.LittleEndian.Uint32(got) != vfsCapRevision3|1 ||
		binary.LittleEndian.Uint32(got[4:]) != 1<<10 || binary.LittleEndian.Uint32(got[20:]) != 100000 {
		t.Fatalf("shifted: %x %v", got, ok)
	}
	back, ok := shiftCapability(got, 0)
	if !ok || !bytes.Equal(back, v2) {
		t.Fatalf("unshifted: %x %v", back, ok)
	}
	if _, ok := shiftCapability([]byte{1, 2, 3}, 0); ok {
		t.Fatal("garbage accepted")
	}
	if !isRoot() {
		testenv.Missing(t, "the kernel's handling of a shifted security.capability needs root")
	}
	// As root with a shift, the kernel accepts and keeps the v3 form.
	j := newJail(t)
	_, err := j.extract(t, privilegedExtract(IDMap{UID: 100000, GID: 100000, Size: 65536}),
		imagetest.File{Name: "ping", Body: "x", Mode: 0o755, Xattrs: map[string]string{"security.capability": string(v2)}})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := unix.Lgetxattr(j.in("ping"), "security.capability", buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != vfsCapSize3 || binary.LittleEndian.Uint32(buf[20:]) != 100000 {
		t.Fatalf("stored capability: %x", buf[:n])
	}
}

func TestOwnershipShift(t *testing.T) {
	testenv.RequireRoot(t)
	j := newJail(t)
	m := IDMap{UID: 100000, GID: 200000, Size: 65536}
	o := privilegedExtract(m)
	o.devices = false
	_, err := j.extract(t, o,
		imagetest.File{Name: "root-owned", Body: "x"},
		imagetest.File{Name: "app/", Type: tar.TypeDir, Uid: 1000, Gid: 1001},
		imagetest.File{Name: "app/file", Body: "x", Uid: 1000, Gid: 1001},
		imagetest.File{Name: "big", Body: "x", Uid: 70000, Gid: 4000000},
		imagetest.File{Name: "link", Type: tar.TypeSymlink, Linkname: "big", Uid: 5, Gid: 6},
		imagetest.Reg("implicit/parent/file", "x"),
	)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string][2]uint32{
		"":                {100000, 200000},
		"root-owned":      {100000, 200000},
		"app":             {101000, 201001},
		"app/file":        {101000, 201001},
		"big":             {165534, 265534},
		"link":            {100005, 200006},
		"implicit":        {100000, 200000},
		"implicit/parent": {100000, 200000},
	} {
		var s unix.Stat_t
		if err := unix.Lstat(j.in(p), &s); err != nil {
			t.Fatal(err)
		}
		if s.Uid != want[0] || s.Gid != want[1] {
			t.Errorf("%q owned by %d:%d, want %d:%d", p, s.Uid, s.Gid, want[0], want[1])
		}
	}
}

func TestModesTimesAndReplacement(t *testing.T) {
	j := newJail(t)
	mt := time.Date(2020, 5, 6, 7, 8, 9, 123456789, time.UTC)
	_, err := j.extract(t, rootOpts(),
		imagetest.File{Name: "./", Type: tar.TypeDir, Mode: 0o750, ModTime: mt},
		imagetest.File{Name: "ro/", Type: tar.TypeDir, Mode: 0o555, ModTime: mt},
		imagetest.File{Name: "ro/file", Body: "x", Mode: 0o444, ModTime: mt},
		imagetest.File{Name: "suid", Body: "x", Mode: 0o4755, ModTime: mt},
		imagetest.File{Name: "sticky/", Type: tar.TypeDir, Mode: 0o1777, ModTime: mt},
		imagetest.File{Name: "sl", Type: tar.TypeSymlink, Linkname: "suid", ModTime: mt},
		imagetest.Reg("was-file", "x"),
		imagetest.Dir("was-file"),
		imagetest.Reg("was-file/child", "y"),
		imagetest.Dir("was-dir"),
		imagetest.Reg("was-dir/child", "y"),
		imagetest.Reg("was-dir", "now a file"),
		imagetest.Reg("hl-src", "shared"),
		imagetest.Hardlink("hl", "hl-src"),
		imagetest.Reg("dup", "first"),
		imagetest.Reg("dup", "second"),
	)
	if err != nil {
		t.Fatal(err)
	}
	j.check(t)
	for p, want := range map[string]os.FileMode{
		"":        os.ModeDir | 0o750,
		"ro":      os.ModeDir | 0o555,
		"ro/file": 0o444,
		"suid":    os.ModeSetuid | 0o755,
		"sticky":  os.ModeDir | os.ModeSticky | 0o777,
	} {
		fi, err := os.Lstat(j.in(p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%q mode %v, want %v", p, fi.Mode(), want)
		}
		if !fi.ModTime().Equal(mt) {
			t.Errorf("%q mtime %v, want %v", p, fi.ModTime(), mt)
		}
	}
	if fi, err := os.Lstat(j.in("sl")); err != nil || !fi.ModTime().Equal(mt) {
		t.Errorf("symlink mtime: %v %v", fi, err)
	}
	if fi, err := os.Lstat(j.in("was-file")); err != nil || !fi.IsDir() {
		t.Errorf("was-file: %v %v", fi, err)
	}
	if data, _ := os.ReadFile(j.in("was-dir")); string(data) != "now a file" {
		t.Errorf("was-dir = %q", data)
	}
	if data, _ := os.ReadFile(j.in("dup")); string(data) != "second" {
		t.Errorf("dup = %q", data)
	}
	var a, b unix.Stat_t
	_ = unix.Lstat(j.in("hl"), &a)
	_ = unix.Lstat(j.in("hl-src"), &b)
	if a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("hard link: inodes %d %d nlink %d", a.Ino, b.Ino, a.Nlink)
	}
}

func TestExtractCompressedAndCancel(t *testing.T) {
	tarData := imagetest.TarBytes(t, imagetest.Reg("a", "hello"))
	for name, data := range map[string][]byte{
		"plain": tarData, "gzip": imagetest.Gzip(t, tarData), "zstd": imagetest.Zstd(t, tarData),
	} {
		t.Run(name, func(t *testing.T) {
			j := newJail(t)
			r, format, release, err := decompress(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			if want := map[string]string{"plain": compressionNone, "gzip": compressionGzip, "zstd": compressionZstd}[name]; format != want {
				t.Fatalf("format %s, want %s", format, want)
			}
			if _, err := extractTar(context.Background(), r, j.root, rootOpts()); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(j.in("a")); string(got) != "hello" {
				t.Fatalf("a = %q", got)
			}
		})
	}
	j := newJail(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := extractTar(ctx, bytes.NewReader(tarData), j.root, rootOpts()); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled extract: %v", err)
	}
}

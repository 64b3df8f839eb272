//go:build linux

package crash

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/image/imagetest"
)

const (
	// diskSmall is the data dir's tmpfs: smaller than the test image.
	diskSmall = "8m"
	// diskLarge is the size it grows to when space is "freed".
	diskLarge = "64m"
	// bigLayerBytes is the random (incompressible) layer that does not
	// fit in diskSmall.
	bigLayerBytes = 12 << 20
	bigLayerSeed  = 7
)

// expectedLayers maps a layer's diff ID to its expected file tree.
type expectedLayers map[string]map[string]treeEntry

// treeEntry is one name of a layer: its type, and the size and sha256 of
// a file or the target of a symlink.
type treeEntry struct {
	typ  byte // 'f', 'd', 'l', 'o' (other)
	size int64
	sum  string
	link string
}

// TestDiskFull gives the data dir a tmpfs smaller than an image: pulling
// and loading it must fail with one clear line (no stack trace) and leave
// no partial layer or temporary file that a later pull could take as
// complete; once there is space, the pull must succeed and the image must
// verify (layer contents, inspect, a run). Then it fills the disk to just
// below what a pull needs, at several margins, so that the failure lands
// on the last layer, the blobs or the index write.
func TestDiskFull(t *testing.T) {
	bbTar := imagetest.TarBytes(t, imagetest.BusyboxFiles(t)...)
	bigTar := imagetest.RandomTar(t, bigLayerBytes, 6, bigLayerSeed)
	img := imagetest.Image(t, imagetest.BusyboxConfig(),
		imagetest.LayerFromBytes(t, imagetest.Gzip(t, bbTar)),
		imagetest.LayerFromBytes(t, imagetest.Gzip(t, bigTar)))
	want := expectedLayers{}
	for _, b := range [][]byte{bbTar, bigTar} {
		sum := sha256.Sum256(b)
		want["sha256:"+hex.EncodeToString(sum[:])] = tarTree(t, b)
	}
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "disk/big:1", img)
	loadRef := "disk/loaded:1"
	tag, err := name.NewTag(loadRef)
	if err != nil {
		t.Fatal(err)
	}
	saveTar := filepath.Join(t.TempDir(), "big.tar")
	if err := tarball.WriteToFile(saveTar, tag, img); err != nil {
		t.Fatal(err)
	}
	// A file of the big layer to check from inside a sandbox.
	probe, probeSum := "", ""
	for p, e := range want["sha256:"+sha256Hex(bigTar)] {
		if e.typ == 'f' && (probe == "" || p < probe) {
			probe, probeSum = p, e.sum
		}
	}

	// Everything below runs in a mount namespace of this thread only (the
	// agentkernel processes are forked from it): the tmpfs never shows on
	// the host and disappears with the thread, which is never unlocked.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		t.Fatalf("unshare: %v", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatalf("making mounts private: %v", err)
	}
	a := newAK(t)
	if err := unix.Mount("tmpfs", a.dataDir, "tmpfs", 0, "size="+diskSmall+",mode=0700"); err != nil {
		t.Fatalf("mounting tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(a.dataDir, unix.MNT_DETACH) })

	// The image does not fit at all: pull (with progress output) and load.
	r := a.run(t, "images", "pull", ref)
	expectENOSPC(t, r, false)
	checkNoPartial(t, a, want, ref)
	r = a.run(t, "-q", "images", "load", "-i", saveTar)
	expectENOSPC(t, r, true)
	checkNoPartial(t, a, want, loadRef)
	r = a.run(t, "-q", "run", "--image", ref, "--", "true")
	expectENOSPC(t, r, true)
	checkNoPartial(t, a, want, ref)

	// Free space: the same pull and load now succeed and verify.
	if err := unix.Mount("tmpfs", a.dataDir, "tmpfs", unix.MS_REMOUNT, "size="+diskLarge+",mode=0700"); err != nil {
		t.Fatalf("growing tmpfs: %v", err)
	}
	base := usedBytes(t, a.dataDir)
	if r := a.run(t, "-q", "images", "pull", ref); r.code != 0 {
		t.Fatalf("pull after freeing space: %v", r)
	}
	need := usedBytes(t, a.dataDir) - base
	verifyImage(t, a, want, ref, probe, probeSum)
	if r := a.run(t, "-q", "images", "load", "-i", saveTar); r.code != 0 {
		t.Fatalf("load after freeing space: %v", r)
	}
	verifyImage(t, a, want, loadRef, "", "")

	// Nearly enough space: the failure moves to the end of the pull.
	if r := a.run(t, "-q", "images", "rm", loadRef); r.code != 0 {
		t.Fatalf("images rm: %v", r)
	}
	failed := 0
	margins := []int64{4 << 10, 8 << 10, 12 << 10, 16 << 10, 64 << 10, 1 << 20, 4 << 20}
	for _, short := range margins {
		if r := a.run(t, "-q", "images", "rm", ref); r.code != 0 {
			t.Fatalf("images rm: %v", r)
		}
		if r := a.run(t, "-q", "images", "prune"); r.code != 0 {
			t.Fatalf("images prune: %v", r)
		}
		filler := fill(t, a.dataDir, need-short)
		r := a.run(t, "-q", "images", "pull", ref)
		if r.code != 0 {
			t.Logf("%d KiB short: %s", short>>10, strings.TrimSpace(r.stderr))
			failed++
			expectENOSPC(t, r, true)
			checkNoPartial(t, a, want, ref)
		} else {
			verifyImage(t, a, want, ref, "", "")
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		if r := a.run(t, "-q", "images", "pull", ref); r.code != 0 {
			t.Fatalf("pull after removing the filler (%d bytes short): %v", short, r)
		}
		verifyImage(t, a, want, ref, "", "")
	}
	if failed < len(margins)/2 {
		t.Errorf("only %d of the nearly-full pulls failed: the fill is not working", failed)
	}
	summary := fmt.Sprintf("disk-full: pull needs %d KiB; %d of %d nearly-full pulls failed cleanly, every retry verified", need>>10, failed, len(margins))
	fmt.Println(summary)
	t.Log(summary)
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// expectENOSPC checks r is a clean failure about disk space: exit 125,
// exactly one "agentkernel:" line (plus at most one hint), no stack trace.
// With quiet, nothing else may be printed.
func expectENOSPC(t *testing.T, r result, quiet bool) {
	t.Helper()
	if r.code != 125 || r.signal != 0 {
		t.Fatalf("want exit 125: %v", r)
	}
	if hasStackTrace(r.stderr) {
		t.Fatalf("stack trace: %v", r)
	}
	var errLines, other []string
	for _, l := range strings.Split(strings.TrimRight(r.stderr, "\n"), "\n") {
		switch {
		case strings.HasPrefix(l, "agentkernel: "):
			errLines = append(errLines, l)
		case strings.HasPrefix(l, "hint: "):
		default:
			other = append(other, l)
		}
	}
	if len(errLines) != 1 || !strings.Contains(errLines[0], "no space left on device") {
		t.Fatalf("want one 'agentkernel: ... no space left on device' line: %v", r)
	}
	if quiet && len(other) > 0 {
		t.Fatalf("quiet failure printed more than the error: %q", other)
	}
}

// checkNoPartial checks what a failed pull or load left: nothing in
// tmp/, no temporary files, only complete layers, and ref either absent
// or complete.
func checkNoPartial(t *testing.T, a *ak, want expectedLayers, ref string) {
	t.Helper()
	store := filepath.Join(a.dataDir, "images")
	if ents, err := os.ReadDir(filepath.Join(store, "tmp")); err == nil && len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("tmp/ not empty after a failed pull: %v", names)
	}
	_ = filepath.WalkDir(store, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if strings.HasPrefix(p, filepath.Join(store, "layers")+"/") && strings.Count(strings.TrimPrefix(p, store), "/") > 3 {
			return filepath.SkipDir
		}
		if strings.HasPrefix(d.Name(), ".") || strings.Contains(d.Name(), ".tmp") {
			t.Errorf("temporary file left: %s", p)
		}
		return nil
	})
	checkLayers(t, a, want)
	if data, err := os.ReadFile(filepath.Join(store, "index.json")); err == nil && !json.Valid(data) {
		t.Errorf("index.json is not valid JSON after a failed pull: %q", data)
	}
	r := a.run(t, "images", "inspect", ref)
	if hasStackTrace(r.stderr) {
		t.Fatalf("inspect: %v", r)
	}
	if r.code == 0 {
		checkInspect(t, r, ref)
	}
}

// checkLayers checks that every layer directory is one of want's and
// holds exactly its files.
func checkLayers(t *testing.T, a *ak, want expectedLayers) {
	t.Helper()
	dir := filepath.Join(a.dataDir, "images", "layers", "sha256")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("layers: %v", err)
	}
	for _, e := range ents {
		w, ok := want["sha256:"+e.Name()]
		if !ok {
			t.Errorf("unknown layer directory %s", e.Name())
			continue
		}
		got := dirTree(t, filepath.Join(dir, e.Name(), "fs"))
		if diff := diffTrees(w, got); diff != "" {
			t.Errorf("layer %s is not complete: %s", e.Name()[:12], diff)
		}
	}
}

// checkInspect checks an inspected image has every layer present.
func checkInspect(t *testing.T, r result, ref string) {
	t.Helper()
	var d []struct {
		Layers []struct {
			DiffID  string `json:"diff_id"`
			Present bool   `json:"present"`
		} `json:"layers"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		var one struct {
			Layers []struct {
				DiffID  string `json:"diff_id"`
				Present bool   `json:"present"`
			} `json:"layers"`
		}
		if err2 := json.Unmarshal([]byte(r.stdout), &one); err2 != nil {
			t.Fatalf("inspect %s output: %v\n%s", ref, err, r.stdout)
		}
		d = append(d, one)
	}
	if len(d) != 1 || len(d[0].Layers) != 2 {
		t.Fatalf("inspect %s: %s", ref, r.stdout)
	}
	for _, l := range d[0].Layers {
		if !l.Present {
			t.Errorf("inspect %s: layer %s is recorded but not present", ref, l.DiffID)
		}
	}
}

// verifyImage checks ref is cached completely and, with probe, that a
// sandbox reads the expected bytes from the big layer.
func verifyImage(t *testing.T, a *ak, want expectedLayers, ref, probe, probeSum string) {
	t.Helper()
	checkLayers(t, a, want)
	r := a.run(t, "images", "inspect", ref)
	if r.code != 0 {
		t.Fatalf("inspect: %v", r)
	}
	checkInspect(t, r, ref)
	if probe == "" {
		return
	}
	r = a.run(t, "-q", "run", "--pull", "never", "--image", ref, "--", "sha256sum", "/"+probe)
	if r.code != 0 || !strings.HasPrefix(r.stdout, probeSum+" ") {
		t.Fatalf("sha256sum of %s in a sandbox: %v (want %s)", probe, r, probeSum)
	}
}

// tarTree lists what a layer tar should unpack to.
func tarTree(t *testing.T, b []byte) map[string]treeEntry {
	t.Helper()
	out := map[string]treeEntry{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := path.Clean(strings.TrimPrefix(h.Name, "/"))
		if p == "." {
			continue
		}
		// Parent directories a tar leaves implicit.
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := out[d]; !ok {
				out[d] = treeEntry{typ: 'd'}
			}
		}
		switch h.Typeflag {
		case tar.TypeDir:
			out[p] = treeEntry{typ: 'd'}
		case tar.TypeSymlink:
			out[p] = treeEntry{typ: 'l', link: h.Linkname}
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[p] = treeEntry{typ: 'f', size: int64(len(data)), sum: sha256Hex(data)}
		case tar.TypeLink:
			out[p] = out[path.Clean(strings.TrimPrefix(h.Linkname, "/"))]
		default:
			out[p] = treeEntry{typ: 'o'}
		}
	}
	return out
}

// dirTree lists an unpacked layer the way tarTree lists a tar.
func dirTree(t *testing.T, root string) map[string]treeEntry {
	t.Helper()
	out := map[string]treeEntry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		switch {
		case d.IsDir():
			out[rel] = treeEntry{typ: 'd'}
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = treeEntry{typ: 'l', link: l}
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = treeEntry{typ: 'f', size: int64(len(data)), sum: sha256Hex(data)}
		default:
			out[rel] = treeEntry{typ: 'o'}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading layer %s: %v", root, err)
	}
	return out
}

// diffTrees describes the first differences between two trees.
func diffTrees(want, got map[string]treeEntry) string {
	var diffs []string
	for p, w := range want {
		if g, ok := got[p]; !ok {
			diffs = append(diffs, "missing "+p)
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s is %+v, want %+v", p, g, w))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			diffs = append(diffs, "unexpected "+p)
		}
	}
	if len(diffs) > 5 {
		diffs = append(diffs[:5], fmt.Sprintf("and %d more", len(diffs)-5))
	}
	return strings.Join(diffs, "; ")
}

// usedBytes is how much of the filesystem holding dir is in use.
func usedBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * int64(st.Bsize)
}

// fill writes a file in dir that leaves free bytes available.
func fill(t *testing.T, dir string, free int64) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	size := int64(st.Bavail)*int64(st.Bsize) - free
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for size > 0 {
		n := min(size, int64(len(buf)))
		if _, err := f.Write(buf[:n]); err != nil {
			t.Fatalf("filling: %v", err)
		}
		size -= n
	}
	return p
}

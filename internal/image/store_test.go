//go:build linux

package image_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/image/cache"
	"github.com/agentkernel/agentkernel/internal/image/imagetest"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

func openStore(t testing.TB, dir string, opts image.Options) *image.Store {
	t.Helper()
	s, err := image.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newStore(t testing.TB) (*image.Store, string) {
	t.Helper()
	dir := t.TempDir()
	return openStore(t, dir, image.Options{}), dir
}

func ensure(t testing.TB, s *image.Store, ref string, p image.PullPolicy) image.Rootfs {
	t.Helper()
	rfs, err := s.Ensure(context.Background(), ref, p)
	if err != nil {
		t.Fatalf("Ensure(%s, %s): %v", ref, p, err)
	}
	return rfs
}

// find returns the topmost layer holding path, as overlayfs would.
func find(rfs image.Rootfs, p string) (string, bool) {
	for i := len(rfs.Layers) - 1; i >= 0; i-- {
		full := filepath.Join(rfs.Layers[i], p)
		if _, err := os.Lstat(full); err == nil {
			return full, true
		}
	}
	return "", false
}

func readIn(t testing.TB, rfs image.Rootfs, p string) string {
	t.Helper()
	full, ok := find(rfs, p)
	if !ok {
		t.Fatalf("%s not in any layer", p)
	}
	data, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestParsePullPolicy(t *testing.T) {
	for in, want := range map[string]image.PullPolicy{"": image.PullMissing, "missing": image.PullMissing, "Always": image.PullAlways, "never": image.PullNever} {
		if got, err := image.ParsePullPolicy(in); err != nil || got != want {
			t.Errorf("ParsePullPolicy(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := image.ParsePullPolicy("sometimes"); err == nil {
		t.Error("bad policy accepted")
	}
}

func TestNormalizeRef(t *testing.T) {
	for in, want := range map[string]string{
		"alpine:3.20":              "index.docker.io/library/alpine:3.20",
		"alpine":                   "index.docker.io/library/alpine:latest",
		"docker.io/library/alpine": "index.docker.io/library/alpine:latest",
		"user/app:1":               "index.docker.io/user/app:1",
		"ghcr.io/o/r:tag":          "ghcr.io/o/r:tag",
		"localhost:5000/x":         "localhost:5000/x:latest",
		"host":                     "host",
		"host:latest":              "host",
		"alpine@sha256:" + strings.Repeat("a", 64): "index.docker.io/library/alpine@sha256:" + strings.Repeat("a", 64),
	} {
		if got, err := image.NormalizeRef(in); err != nil || got != want {
			t.Errorf("NormalizeRef(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestHostImage(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, image.Options{})
	for _, ref := range []string{"host", "host:latest"} {
		for _, p := range []image.PullPolicy{image.PullMissing, image.PullAlways, image.PullNever} {
			rfs := ensure(t, s, ref, p)
			if !rfs.Host || rfs.Ref != "host" || len(rfs.Layers) != 0 {
				t.Fatalf("%s: %+v", ref, rfs)
			}
			if len(rfs.Config.Env) == 0 || !strings.HasPrefix(rfs.Config.Env[0], "PATH=/usr/local/sbin:") {
				t.Fatalf("host env: %v", rfs.Config.Env)
			}
		}
	}
	if _, err := s.Remove(context.Background(), "host"); err == nil {
		t.Fatal("removing host succeeded")
	}
}

func TestPullListInspectRemovePrune(t *testing.T) {
	reg := imagetest.NewRegistry(t)
	ref := imagetest.PushBusybox(t, reg.Host, "busybox:1")
	s, _ := newStore(t)
	ctx := context.Background()

	rfs := ensure(t, s, ref, image.PullMissing)
	if rfs.Ref != ref || !strings.HasPrefix(rfs.Digest, "sha256:") || len(rfs.Layers) != 1 {
		t.Fatalf("rootfs: %+v", rfs)
	}
	if rfs.Config.Cmd[0] != "/bin/sh" || !strings.HasPrefix(rfs.Config.Env[0], "PATH=") {
		t.Fatalf("config: %+v", rfs.Config)
	}
	if got := readIn(t, rfs, "etc/passwd"); !strings.Contains(got, "app:x:1000:1000") {
		t.Fatalf("passwd: %q", got)
	}
	if target, err := os.Readlink(filepath.Join(rfs.Layers[0], "bin/sh")); err != nil || target != "busybox" {
		t.Fatalf("bin/sh -> %q %v", target, err)
	}
	if fi, err := os.Stat(filepath.Join(rfs.Layers[0], "tmp")); err != nil || fi.Mode() != os.ModeDir|os.ModeSticky|0o777 {
		t.Fatalf("tmp: %v %v", fi, err)
	}

	// A cache hit does not talk to the registry.
	before := reg.Requests()
	again := ensure(t, s, ref, image.PullMissing)
	ensure(t, s, ref, image.PullNever)
	if reg.Requests() != before {
		t.Fatalf("cache hit made %d registry requests", reg.Requests()-before)
	}
	if again.Digest != rfs.Digest || again.Layers[0] != rfs.Layers[0] {
		t.Fatalf("cache hit differs: %+v", again)
	}
	// PullAlways asks the registry but downloads nothing new.
	blobs := reg.BlobRequests()
	ensure(t, s, ref, image.PullAlways)
	if reg.BlobRequests() != blobs {
		t.Fatal("PullAlways of an unchanged image downloaded blobs")
	}
	// By digest, with and without the repository.
	before = reg.Requests()
	ensure(t, s, rfs.Digest, image.PullNever)
	ensure(t, s, rfs.Digest[:19], image.PullNever)
	ensure(t, s, reg.Host+"/busybox@"+rfs.Digest, image.PullMissing)
	if reg.Requests() != before {
		t.Fatal("digest lookups of a cached image made registry requests")
	}
	// The same image under a second tag: recorded without downloading.
	ref2 := imagetest.PushBusybox(t, reg.Host, "busybox:2")
	blobs = reg.BlobRequests()
	if r2 := ensure(t, s, ref2, image.PullMissing); r2.Digest != rfs.Digest || reg.BlobRequests() != blobs {
		t.Fatalf("second tag: %+v, %d blob requests", r2, reg.BlobRequests()-blobs)
	}

	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 { // two tags
		t.Fatalf("list: %+v", list)
	}
	var row image.ImageSummary
	for _, r := range list {
		if r.Tag == "1" {
			row = r
		}
	}
	if row.Repository != reg.Host+"/busybox" || row.Digest != rfs.Digest || row.Size < 1<<20 || time.Since(row.Pulled) > time.Minute {
		t.Fatalf("list row: %+v", row)
	}

	d, err := s.Inspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if d.Digest != rfs.Digest || len(d.Layers) != 1 || !d.Layers[0].Present || d.Layers[0].Path != rfs.Layers[0] ||
		d.Platform != "linux/"+runtime.GOARCH || d.Source != "pull" || len(d.Tags) != 2 {
		t.Fatalf("inspect: %+v", d)
	}
	var m v1.Manifest
	if err := json.Unmarshal(d.Manifest, &m); err != nil || m.Layers[0].Digest.String() != d.Layers[0].Digest {
		t.Fatalf("inspect manifest: %v %s", err, d.Manifest)
	}
	if _, err := json.Marshal(d); err != nil {
		t.Fatal(err)
	}

	// Nothing to prune while the image exists.
	pr, err := s.Prune(ctx, nil)
	if err != nil || pr.Layers != 0 {
		t.Fatalf("prune with image present: %+v %v", pr, err)
	}
	res, err := s.Remove(ctx, ref)
	if err != nil || len(res.Untagged) != 1 || res.Deleted != "" {
		t.Fatalf("remove tag: %+v %v", res, err)
	}
	res, err = s.Remove(ctx, rfs.Digest)
	if err != nil || res.Deleted != rfs.Digest {
		t.Fatalf("remove digest: %+v %v", res, err)
	}
	if _, err := s.Inspect(ctx, ref); !errors.Is(err, image.ErrNotFound) {
		t.Fatalf("inspect after remove: %v", err)
	}
	if _, err := s.Ensure(ctx, ref, image.PullNever); !errors.Is(err, image.ErrNotFound) {
		t.Fatalf("Ensure never after remove: %v", err)
	}
	if _, err := os.Stat(rfs.Layers[0]); err != nil {
		t.Fatal("remove deleted the layer; only prune may")
	}
	pr, err = s.Prune(ctx, nil)
	if err != nil || pr.Layers != 1 || pr.Bytes < 1<<20 || pr.Blobs != 2 {
		t.Fatalf("prune: %+v %v", pr, err)
	}
	if _, err := os.Stat(rfs.Layers[0]); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("layer still there after prune: %v", err)
	}
	if list, _ := s.List(ctx); len(list) != 0 {
		t.Fatalf("list after prune: %+v", list)
	}
	if _, err := s.Remove(ctx, ref); !errors.Is(err, image.ErrNotFound) {
		t.Fatalf("remove unknown: %v", err)
	}
}

func TestRetagLeavesDanglingForPrune(t *testing.T) {
	reg := imagetest.NewRegistry(t)
	s, _ := newStore(t)
	ctx := context.Background()
	ref := reg.Push(t, "app:latest", imagetest.Image(t, v1.Config{}, imagetest.Layer(t, imagetest.Reg("v", "1"))))
	old := ensure(t, s, ref, image.PullMissing)
	reg.Push(t, "app:latest", imagetest.Image(t, v1.Config{}, imagetest.Layer(t, imagetest.Reg("v", "2"))))
	if got := ensure(t, s, ref, image.PullMissing); got.Digest != old.Digest {
		t.Fatal("PullMissing re-pulled a cached tag")
	}
	cur := ensure(t, s, ref, image.PullAlways)
	if cur.Digest == old.Digest || readIn(t, cur, "v") != "2" {
		t.Fatalf("PullAlways did not update: %+v", cur)
	}
	list, _ := s.List(ctx)
	if len(list) != 2 || list[0].Tag != "" && list[1].Tag != "" {
		t.Fatalf("list: %+v", list)
	}
	pr, err := s.Prune(ctx, nil)
	if err != nil || len(pr.Images) != 1 || pr.Images[0] != old.Digest || pr.Layers != 1 {
		t.Fatalf("prune: %+v %v", pr, err)
	}
	ensure(t, s, ref, image.PullNever)
}

// TestPruneKeepsStackedLayers: a removed image's layers that a sandbox
// or snapshot still stacks (by the path recorded in its spec, under
// whatever form of the data directory) survive prune, which says who
// keeps them; once nothing stacks them the next prune removes them; a
// failure to learn what is stacked removes nothing.
func TestPruneKeepsStackedLayers(t *testing.T) {
	reg := imagetest.NewRegistry(t)
	s, _ := newStore(t)
	ctx := context.Background()
	a := reg.Push(t, "a:1", imagetest.Image(t, v1.Config{}, imagetest.Layer(t, imagetest.Reg("shared", "s")), imagetest.Layer(t, imagetest.Reg("a", "a"))))
	b := reg.Push(t, "b:1", imagetest.Image(t, v1.Config{}, imagetest.Layer(t, imagetest.Reg("b", "b"))))
	ra, rb := ensure(t, s, a, image.PullMissing), ensure(t, s, b, image.PullMissing)
	for _, ref := range []string{a, b} {
		if _, err := s.Remove(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
	// The first layer of a recorded through a link to the data directory.
	link := filepath.Join(t.TempDir(), "data")
	storeRoot := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(ra.Layers[0]))))
	if err := os.Symlink(filepath.Dir(storeRoot), link); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(filepath.Dir(storeRoot), ra.Layers[0])
	stacked := map[string][]string{
		filepath.Join(link, rel) + "/":     {"sandbox dev"},
		ra.Layers[1]:                       {"snapshot s1", "sandbox dev"},
		"/elsewhere/snapshots/layers/0123": {"snapshot s1"},
	}
	if _, err := s.Prune(ctx, func(context.Context) (map[string][]string, error) { return nil, errors.New("state.db: locked") }); err == nil || !strings.Contains(err.Error(), "nothing pruned") {
		t.Fatalf("prune with an unknown stack: %v", err)
	}
	for _, l := range append(ra.Layers, rb.Layers...) {
		if _, err := os.Stat(l); err != nil {
			t.Fatalf("a failed prune removed %s: %v", l, err)
		}
	}
	pr, err := s.Prune(ctx, func(context.Context) (map[string][]string, error) { return stacked, nil })
	if err != nil || pr.Layers != 1 || pr.Kept != 2 || strings.Join(pr.KeptFor, ",") != "sandbox dev,snapshot s1" {
		t.Fatalf("prune: %+v %v", pr, err)
	}
	for _, l := range ra.Layers {
		if _, err := os.Stat(l); err != nil {
			t.Fatalf("stacked layer %s pruned: %v", l, err)
		}
	}
	if _, err := os.Stat(rb.Layers[0]); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("unstacked layer kept: %v", err)
	}
	pr, err = s.Prune(ctx, func(context.Context) (map[string][]string, error) { return nil, nil })
	if err != nil || pr.Layers != 2 || pr.Kept != 0 {
		t.Fatalf("prune once nothing stacks them: %+v %v", pr, err)
	}
}

// mountOverlay mounts the layers read-only and returns the mount point;
// where overlayfs cannot be mounted here, a prerequisite is missing
// (internal/testenv).
func mountOverlay(t *testing.T, layers []string) string {
	t.Helper()
	testenv.RequireRoot(t) // mounting overlayfs
	mnt := t.TempDir()
	lower := make([]string, len(layers))
	for i, l := range layers {
		lower[len(layers)-1-i] = l
	}
	if err := unix.Mount("overlay", mnt, "overlay", unix.MS_RDONLY, "lowerdir="+strings.Join(lower, ":")); err != nil {
		testenv.Missing(t, "overlayfs cannot be mounted here: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	return mnt
}

func TestWhiteoutsAndOpaqueDirs(t *testing.T) {
	reg := imagetest.NewRegistry(t)
	base := imagetest.Layer(t,
		imagetest.Dir("etc"), imagetest.Reg("etc/keep", "k"), imagetest.Reg("etc/gone", "g"),
		imagetest.Dir("cache"), imagetest.Reg("cache/a", "a"), imagetest.Reg("cache/b", "b"),
		imagetest.Dir("cache/sub"), imagetest.Reg("cache/sub/c", "c"),
		imagetest.Dir("olddir"), imagetest.Reg("olddir/x", "x"),
		imagetest.Reg("file", "f1"),
	)
	mid := imagetest.ZstdLayer(t,
		imagetest.Whiteout("etc/gone"),
		imagetest.Opaque("cache"), imagetest.Reg("cache/new", "n"),
		imagetest.Whiteout("olddir"),
		imagetest.Reg("file", "f2"),
	)
	top := imagetest.Layer(t, imagetest.Reg("etc/added", "a"), imagetest.Whiteout("file"))
	ref := reg.Push(t, "wh:1", imagetest.Image(t, v1.Config{}, base, mid, top))
	s, _ := newStore(t)
	rfs := ensure(t, s, ref, image.PullMissing)
	if len(rfs.Layers) != 3 {
		t.Fatalf("layers: %v", rfs.Layers)
	}
	mid0 := rfs.Layers[1]
	var st unix.Stat_t
	for _, p := range []string{"etc/gone", "olddir"} {
		if err := unix.Lstat(filepath.Join(mid0, p), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
			t.Fatalf("%s is not a whiteout device: %v mode %o", p, err, st.Mode)
		}
	}
	buf := make([]byte, 8)
	if n, err := unix.Lgetxattr(filepath.Join(mid0, "cache"), "user.overlay.opaque", buf); err != nil || string(buf[:n]) != "y" {
		t.Fatalf("cache not opaque (user): %v", err)
	}
	if os.Geteuid() == 0 {
		if n, err := unix.Lgetxattr(filepath.Join(mid0, "cache"), "trusted.overlay.opaque", buf); err != nil || string(buf[:n]) != "y" {
			t.Fatalf("cache not opaque (trusted): %v", err)
		}
	} else if !rfs.UserXattr {
		t.Fatal("rootless rootfs must ask for userxattr")
	}

	// The merged view is what the image means, in both overlay modes.
	want := "cache,cache/new,etc,etc/added,etc/keep"
	t.Run("trusted", func(t *testing.T) {
		if rfs.UserXattr {
			t.Skip("rootless layers carry only user.overlay marks")
		}
		mnt := mountOverlay(t, rfs.Layers)
		if got := strings.Join(walkNames(mnt), ","); got != want {
			t.Fatalf("merged tree:\n got %s\nwant %s", got, want)
		}
	})
	t.Run("userxattr", func(t *testing.T) {
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			testenv.Missing(t, "unshare(1) is not installed (util-linux)")
		}
		lower := make([]string, len(rfs.Layers))
		for i, l := range rfs.Layers {
			lower[len(rfs.Layers)-1-i] = l
		}
		mnt := t.TempDir()
		script := `mount -t overlay overlay -o ro,userxattr,lowerdir="$1" "$2" && cd "$2" && find . -mindepth 1 | sort`
		out, err := exec.Command(unshare, "-Urm", "sh", "-c", script, "sh", strings.Join(lower, ":"), mnt).CombinedOutput()
		if err != nil {
			testenv.Missing(t, "overlayfs with userxattr in a user namespace (Linux 5.11 or later, unprivileged user namespaces): %v: %s", err, out)
		}
		got := strings.ReplaceAll(strings.ReplaceAll(strings.TrimSpace(string(out)), "./", ""), "\n", ",")
		if got != want {
			t.Fatalf("merged tree (userxattr):\n got %s\nwant %s", got, want)
		}
	})
}

func walkNames(root string) []string {
	var got []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != root {
			rel, _ := filepath.Rel(root, p)
			got = append(got, rel)
		}
		return nil
	})
	sort.Strings(got)
	return got
}

func TestMultiArchIndex(t *testing.T) {
	reg := imagetest.NewRegistry(t)
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	mk := func(arch string) v1.Image {
		return imagetest.ImageFor(t, v1.Platform{OS: "linux", Architecture: arch}, v1.Config{Env: []string{"ARCH=" + arch}},
			imagetest.Layer(t, imagetest.Reg("arch", arch)))
	}
	idx := imagetest.Index(t,
		imagetest.PlatformImage{Platform: v1.Platform{OS: "linux", Architecture: other}, Image: mk(other)},
		imagetest.PlatformImage{Platform: imagetest.HostPlatform(), Image: mk(runtime.GOARCH)},
	)
	ref := reg.PushIndex(t, "multi:1", idx)
	idxDigest, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}

	s, _ := newStore(t)
	rfs := ensure(t, s, ref, image.PullMissing)
	if readIn(t, rfs, "arch") != runtime.GOARCH || rfs.Config.Env[0] != "ARCH="+runtime.GOARCH {
		t.Fatalf("host platform not chosen: %+v", rfs)
	}
	// The index digest finds the image too.
	ensure(t, s, reg.Host+"/multi@"+idxDigest.String(), image.PullNever)

	dir := t.TempDir()
	so := openStore(t, dir, image.Options{Platform: "linux/" + other})
	rfs = ensure(t, so, ref, image.PullMissing)
	if readIn(t, rfs, "arch") != other {
		t.Fatalf("--platform override not honoured: %s", readIn(t, rfs, "arch"))
	}
	d, _ := so.Inspect(context.Background(), ref)
	if d.Platform != "linux/"+other || d.IndexDigest != idxDigest.String() {
		t.Fatalf("inspect: %s %s", d.Platform, d.IndexDigest)
	}
	sx := openStore(t, t.TempDir(), image.Options{Platform: "linux/riscv64"})
	_, err = sx.Ensure(context.Background(), ref, image.PullMissing)
	if !errors.Is(err, image.ErrNotFound) || !strings.Contains(err.Error(), "linux/"+other) {
		t.Fatalf("missing platform: %v", err)
	}
}

func TestBasicAuthViaDockerConfig(t *testing.T) {
	reg := imagetest.NewRegistry(t, imagetest.WithBasicAuth("alice", "s3cret"))
	ref := reg.Push(t, "private/app:1", imagetest.Image(t, v1.Config{}, imagetest.Layer(t, imagetest.Reg("secret", "yes"))))

	t.Setenv("DOCKER_CONFIG", t.TempDir()) // empty: no credentials
	s, _ := newStore(t)
	_, err := s.Ensure(context.Background(), ref, image.PullMissing)
	if err == nil || errors.Is(err, image.ErrUnreachable) {
		t.Fatalf("anonymous pull: %v", err)
	}
	t.Setenv("DOCKER_CONFIG", imagetest.DockerConfig(t, reg.Host, "alice", "s3cret"))
	rfs := ensure(t, s, ref, image.PullMissing)
	if readIn(t, rfs, "secret") != "yes" {
		t.Fatal("wrong content")
	}
}

func TestLoadDockerSave(t *testing.T) {
	img := imagetest.Image(t, v1.Config{Cmd: []string{"/bin/app"}},
		imagetest.Layer(t, imagetest.Reg("one", "1")), imagetest.Layer(t, imagetest.Reg("two", "2")))
	tag, _ := name.NewTag("example.com/saved/app:v1")
	p := filepath.Join(t.TempDir(), "save.tar")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.Write(tag, img, f); err != nil {
		t.Fatal(err)
	}
	f.Close()

	for _, variant := range []string{"plain", "gzip"} {
		t.Run(variant, func(t *testing.T) {
			in := p
			if variant == "gzip" {
				data, _ := os.ReadFile(p)
				in = p + ".gz"
				if err := os.WriteFile(in, imagetest.Gzip(t, data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s, _ := newStore(t)
			loaded, err := s.Load(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			if len(loaded) != 1 || loaded[0].Ref != "example.com/saved/app:v1" {
				t.Fatalf("loaded: %+v", loaded)
			}
			rfs := ensure(t, s, "example.com/saved/app:v1", image.PullNever)
			if readIn(t, rfs, "one") != "1" || readIn(t, rfs, "two") != "2" || rfs.Config.Cmd[0] != "/bin/app" {
				t.Fatalf("rootfs: %+v", rfs)
			}
			d, err := s.Inspect(context.Background(), loaded[0].Digest)
			if err != nil || d.Source != "load" {
				t.Fatalf("inspect: %+v %v", d, err)
			}
		})
	}
}

func TestLoadOCILayoutDirAndTar(t *testing.T) {
	img := imagetest.Image(t, v1.Config{Env: []string{"A=1"}}, imagetest.Layer(t, imagetest.Reg("oci", "yes")))
	untagged := imagetest.Image(t, v1.Config{}, imagetest.ZstdLayer(t, imagetest.Reg("z", "zstd")))
	dir := filepath.Join(t.TempDir(), "layout")
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "registry.example/oci/app:2"})); err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(untagged, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "latest"})); err != nil {
		t.Fatal(err)
	}
	untaggedDigest, _ := untagged.Digest()

	check := func(t *testing.T, s *image.Store, loaded []image.ImageSummary) {
		if len(loaded) != 2 || loaded[0].Ref != "registry.example/oci/app:2" || loaded[1].Ref != "" {
			t.Fatalf("loaded: %+v", loaded)
		}
		rfs := ensure(t, s, "registry.example/oci/app:2", image.PullNever)
		if readIn(t, rfs, "oci") != "yes" || rfs.Config.Env[0] != "A=1" {
			t.Fatalf("rootfs: %+v", rfs)
		}
		rfs = ensure(t, s, untaggedDigest.String(), image.PullNever)
		if readIn(t, rfs, "z") != "zstd" {
			t.Fatal("zstd layer content")
		}
	}
	t.Run("dir", func(t *testing.T) {
		s, _ := newStore(t)
		loaded, err := s.Load(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		check(t, s, loaded)
	})
	t.Run("tar", func(t *testing.T) {
		tp := filepath.Join(t.TempDir(), "layout.tar")
		writeTarOfDir(t, dir, tp)
		s, _ := newStore(t)
		loaded, err := s.Load(context.Background(), tp)
		if err != nil {
			t.Fatal(err)
		}
		check(t, s, loaded)
	})
	t.Run("garbage", func(t *testing.T) {
		s, _ := newStore(t)
		bad := filepath.Join(t.TempDir(), "bad.tar")
		_ = os.WriteFile(bad, imagetest.TarBytes(t, imagetest.Reg("hello", "x")), 0o644)
		if _, err := s.Load(context.Background(), bad); err == nil {
			t.Fatal("loaded a tar that is no image")
		}
	})
}

func writeTarOfDir(t *testing.T, dir, out string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, _ := d.Info()
		h, _ := tar.FileInfoHeader(fi, "")
		h.Name = "./" + rel
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			data, _ := os.ReadFile(p)
			_, err = tw.Write(data)
		}
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = os.WriteFile(out, buf.Bytes(), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestImport(t *testing.T) {
	s, _ := newStore(t)
	p := filepath.Join(t.TempDir(), "rootfs.tar.gz")
	data := imagetest.Gzip(t, imagetest.TarBytes(t, imagetest.Dir("./bin"), imagetest.Reg("./bin/tool", "#!/bin/sh\n"), imagetest.Reg("./etc/os-release", "ID=test\n")))
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := s.Import(context.Background(), p, "mytools:1")
	if err != nil {
		t.Fatal(err)
	}
	if sum.Ref != "index.docker.io/library/mytools:1" {
		t.Fatalf("summary: %+v", sum)
	}
	rfs := ensure(t, s, "mytools:1", image.PullNever)
	if readIn(t, rfs, "etc/os-release") != "ID=test\n" || !strings.HasPrefix(rfs.Config.Env[0], "PATH=") {
		t.Fatalf("rootfs: %+v", rfs)
	}
	// Importing the same tarball again shares the layer.
	if _, err := s.Import(context.Background(), p, "mytools:2"); err != nil {
		t.Fatal(err)
	}
	if rfs2 := ensure(t, s, "mytools:2", image.PullNever); rfs2.Layers[0] != rfs.Layers[0] {
		t.Fatal("identical import got its own layer")
	}
	if _, err := s.Import(context.Background(), p, "host"); err == nil {
		t.Fatal("import as host accepted")
	}
}

func layerDirs(t testing.TB, dataDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, "images", "layers", "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func tmpEntries(t testing.TB, dataDir string) []string {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Join(dataDir, "images", "tmp"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestConcurrentEnsureSharesLayers(t *testing.T) {
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "conc:1", imagetest.Image(t, v1.Config{},
		imagetest.RandomLayer(t, 2<<20, 20, 1), imagetest.RandomLayer(t, 2<<20, 20, 2), imagetest.RandomLayer(t, 1<<20, 5, 3)))
	dir := t.TempDir()
	// Two Stores on one directory stand for two processes: their flocks
	// are on separate open files.
	stores := []*image.Store{openStore(t, dir, image.Options{}), openStore(t, dir, image.Options{})}
	var wg sync.WaitGroup
	results := make([]image.Rootfs, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = stores[i%2].Ensure(context.Background(), ref, image.PullMissing)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Ensure %d: %v", i, err)
		}
		if strings.Join(results[i].Layers, ":") != strings.Join(results[0].Layers, ":") {
			t.Fatalf("different layers: %v vs %v", results[i].Layers, results[0].Layers)
		}
	}
	if n := len(layerDirs(t, dir)); n != 3 {
		t.Fatalf("%d layer directories, want 3", n)
	}
	if tmp := tmpEntries(t, dir); len(tmp) != 0 {
		t.Fatalf("leftovers in tmp: %v", tmp)
	}
	// Each layer was downloaded once: three layers plus at most one
	// config fetch per Ensure.
	if n := reg.BlobRequests(); n > 3+4 {
		t.Fatalf("%d blob requests: some layer was downloaded twice", n)
	}
}

func hashTree(t testing.TB, root string) string {
	t.Helper()
	h := sha256.New()
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		io.WriteString(h, rel+"\n")
		if d.Type().IsRegular() {
			f, err := os.Open(p)
			if err == nil {
				_, _ = io.Copy(h, f)
				f.Close()
			}
		}
		return nil
	})
	return string(h.Sum(nil))
}

func TestCancelledPullLeavesNothingComplete(t *testing.T) {
	th := imagetest.NewThrottle(16<<10, 5*time.Millisecond)
	reg := imagetest.NewRegistry(t, imagetest.WithMiddleware(th.Middleware))
	content := imagetest.RandomTar(t, 1<<20, 10, 7)
	ref := reg.Push(t, "slow:1", imagetest.Image(t, v1.Config{}, imagetest.LayerFromBytes(t, imagetest.Gzip(t, content))))
	dir := t.TempDir()
	s := openStore(t, dir, image.Options{})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Ensure(ctx, ref, image.PullMissing)
		done <- err
	}()
	select {
	case <-th.Started:
	case err := <-done:
		t.Fatalf("pull finished before it could be cancelled: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("download never started")
	}
	time.Sleep(20 * time.Millisecond)
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled pull: %v", err)
	}
	if n := len(layerDirs(t, dir)); n != 0 {
		t.Fatalf("a cancelled pull left %d layer directories", n)
	}
	if tmp := tmpEntries(t, dir); len(tmp) != 0 {
		t.Fatalf("a cancelled pull left %v in tmp", tmp)
	}
	if _, err := s.Ensure(context.Background(), ref, image.PullNever); !errors.Is(err, image.ErrNotFound) {
		t.Fatalf("cancelled image counts as cached: %v", err)
	}

	th.Enabled.Store(false)
	rfs := ensure(t, s, ref, image.PullMissing)
	// Verify: the unpacked layer equals the pushed content.
	want := t.TempDir()
	wantStore := filepath.Join(want, "x")
	_ = os.Mkdir(wantStore, 0o755)
	other := openStore(t, t.TempDir(), image.Options{})
	if _, err := other.Import(context.Background(), writeFile(t, content), "ref:1"); err != nil {
		t.Fatal(err)
	}
	orfs := ensure(t, other, "ref:1", image.PullNever)
	if hashTree(t, rfs.Layers[0]) != hashTree(t, orfs.Layers[0]) {
		t.Fatal("layer after retry differs from the pushed content")
	}
}

func writeFile(t testing.TB, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCrashLeftoversAreIgnoredAndCleaned(t *testing.T) {
	reg := imagetest.NewRegistry(t)
	layer := imagetest.Layer(t, imagetest.Reg("f", "content"))
	ref := reg.Push(t, "crash:1", imagetest.Image(t, v1.Config{}, layer))
	diffID, _ := layer.DiffID()
	dir := t.TempDir()
	s := openStore(t, dir, image.Options{})
	// A crash mid-unpack leaves a partial directory in tmp/.
	partial := filepath.Join(dir, "images", "tmp", "layer-"+diffID.Hex+"-12345")
	if err := os.MkdirAll(filepath.Join(partial, "fs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ensure(context.Background(), ref, image.PullNever); !errors.Is(err, image.ErrNotFound) {
		t.Fatalf("partial layer taken for an image: %v", err)
	}
	rfs := ensure(t, s, ref, image.PullMissing)
	if readIn(t, rfs, "f") != "content" {
		t.Fatal("content")
	}
	if _, err := os.Stat(partial); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("leftover of the crashed unpack was not removed")
	}
	// A layer directory deleted behind the store's back makes Ensure pull again.
	if err := os.RemoveAll(filepath.Dir(rfs.Layers[0])); err != nil {
		t.Fatal(err)
	}
	rfs = ensure(t, s, ref, image.PullMissing)
	if readIn(t, rfs, "f") != "content" {
		t.Fatal("content after re-pull")
	}
}

func TestUnreachableRegistry(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s, _ := newStore(t)
	start := time.Now()
	_, err = s.Ensure(context.Background(), addr+"/nothing:1", image.PullMissing)
	if !errors.Is(err, image.ErrUnreachable) {
		t.Fatalf("closed port: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("took %v to give up on a closed port", time.Since(start))
	}
	if _, err := s.Ensure(context.Background(), addr+"/nothing:1", image.PullNever); !errors.Is(err, image.ErrNotFound) || errors.Is(err, image.ErrUnreachable) {
		t.Fatalf("never: %v", err)
	}
	// A name that cannot resolve.
	_, err = s.Ensure(context.Background(), "registry.invalid/x:1", image.PullMissing)
	if !errors.Is(err, image.ErrUnreachable) {
		t.Fatalf("unresolvable registry: %v", err)
	}
	// A registry that answers "unknown" is not unreachable.
	reg := imagetest.NewRegistry(t)
	_, err = s.Ensure(context.Background(), reg.Ref("missing:1"), image.PullMissing)
	if errors.Is(err, image.ErrUnreachable) || !errors.Is(err, image.ErrNotFound) {
		t.Fatalf("unknown image: %v", err)
	}
}

func TestIDMapRecordedAndEnforced(t *testing.T) {
	dir := t.TempDir()
	if _, err := image.Open(dir, image.Options{}); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		if _, err := image.Open(dir, image.Options{IDMap: image.IDMap{UID: 1, GID: 1, Size: 1}}); err == nil {
			t.Fatal("rootless id map accepted")
		}
		return
	}
	_, err := image.Open(dir, image.Options{IDMap: image.DefaultIDMap()})
	if err == nil || !strings.Contains(err.Error(), "id map") {
		t.Fatalf("store with another id map opened: %v", err)
	}

	// A root store keeps the image's own ids (sandboxes see them through
	// idmapped mounts).
	reg := imagetest.NewRegistry(t)
	ref := imagetest.PushBusybox(t, reg.Host, "bb:1")
	sdir := t.TempDir()
	s := openStore(t, sdir, image.Options{IDMap: image.DefaultIDMap()})
	rfs := ensure(t, s, ref, image.PullMissing)
	if rfs.IDMap != image.DefaultIDMap() {
		t.Fatalf("rootfs id map: %+v", rfs.IDMap)
	}
	for p, want := range map[string]uint32{"": 0, "etc/passwd": 0, "home/app": 1000, "bin/sh": 0} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(rfs.Layers[0], p), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != want || st.Gid != want {
			t.Errorf("%q owned by %d:%d, want %d", p, st.Uid, st.Gid, want)
		}
	}
	meta, _ := os.ReadFile(filepath.Join(sdir, "images", "store.json"))
	if !strings.Contains(string(meta), `"uid": 0`) || !strings.Contains(string(meta), `"size": 65536`) {
		t.Fatalf("store.json: %s", meta)
	}
}

// TestLegacyStoreConverted: a root store unpacked with the legacy shift
// (image ids + 100000 on disk) is converted once when opened with the
// current map: owners unshifted, set-id bits and file capabilities kept,
// a lean Lookup meanwhile answering "not cached" rather than failing.
func TestLegacyStoreConverted(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "converting a store chowns files: needs root")
	}
	reg := imagetest.NewRegistry(t)
	v2 := []byte{0, 0, 0, 2, 0, 0x20, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0} // cap_net_raw+ep
	img := imagetest.Image(t, imagetest.BusyboxConfig(), imagetest.Layer(t,
		imagetest.File{Name: "bin/", Type: tar.TypeDir, Mode: 0o755},
		imagetest.File{Name: "bin/su", Body: "x", Mode: 0o4755},
		imagetest.File{Name: "bin/ping", Body: "x", Mode: 0o755, Xattrs: map[string]string{"security.capability": string(v2)}},
		imagetest.File{Name: "home/", Type: tar.TypeDir, Mode: 0o755},
		imagetest.File{Name: "home/app/", Type: tar.TypeDir, Mode: 0o700, Uid: 1000, Gid: 1000},
		imagetest.File{Name: "odd", Body: "x", Uid: 70000, Gid: 70000},
	))
	r, err := name.ParseReference(reg.Host + "/legacy:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	old := openStore(t, dir, image.Options{IDMap: cache.LegacyIDMap})
	rfs := ensure(t, old, r.String(), image.PullMissing)
	old.Close()
	layer := rfs.Layers[0]
	owner := func(p string) (uint32, uint32, uint32) {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(layer, p), &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid, st.Gid, st.Mode & 0o7777
	}
	if u, _, _ := owner("bin/su"); u != 100000 {
		t.Fatalf("legacy store not shifted: bin/su owned by %d", u)
	}
	if _, ok, err := cache.Lookup(dir, r.String(), cache.MetaFor(image.DefaultIDMap())); ok || err != nil {
		t.Fatalf("lean lookup in a legacy store: ok=%v err=%v, want a miss", ok, err)
	}

	var progress bytes.Buffer
	s := openStore(t, dir, image.Options{IDMap: image.DefaultIDMap(), Progress: &progress})
	if !strings.Contains(progress.String(), "Converting the image store") {
		t.Errorf("no progress message: %q", progress.String())
	}
	for p, want := range map[string][3]uint32{
		"": {0, 0, 0o755}, "bin/su": {0, 0, 0o4755}, "bin/ping": {0, 0, 0o755},
		"home/app": {1000, 1000, 0o700}, "odd": {65534, 65534, 0o644},
	} {
		if u, g, m := owner(p); u != want[0] || g != want[1] || m != want[2] {
			t.Errorf("%q: %d:%d %o, want %d:%d %o", p, u, g, m, want[0], want[1], want[2])
		}
	}
	buf := make([]byte, 64)
	n, err := unix.Lgetxattr(filepath.Join(layer, "bin/ping"), "security.capability", buf)
	if err != nil || !bytes.Equal(buf[:n], v2) {
		t.Errorf("file capability after conversion: %x %v, want %x", buf[:max(n, 0)], err, v2)
	}
	if got := ensure(t, s, r.String(), image.PullNever); got.Layers[0] != layer {
		t.Errorf("converted store lost the image: %v", got.Layers)
	}
	if _, ok, err := cache.Lookup(dir, r.String(), cache.MetaFor(image.DefaultIDMap())); !ok || err != nil {
		t.Errorf("lean lookup after conversion: ok=%v err=%v", ok, err)
	}
}

func TestInsecureRegistryOption(t *testing.T) {
	// The in-process registry speaks plain HTTP; reach it by a
	// non-loopback name that only the insecure list allows.
	reg := imagetest.NewRegistry(t)
	_, port, _ := net.SplitHostPort(reg.Host)
	ref := imagetest.PushBusybox(t, reg.Host, "ins:1")
	alias := "localhost:" + port // loopback names are always insecure
	s, _ := newStore(t)
	ensure(t, s, strings.Replace(ref, reg.Host, alias, 1), image.PullMissing)
}

// tamperWriter flips byte 2000 of the body it writes.
type tamperWriter struct {
	http.ResponseWriter
	off int
}

func (w *tamperWriter) Write(p []byte) (int, error) {
	const at = 2000
	if w.off <= at && at < w.off+len(p) {
		q := append([]byte(nil), p...)
		q[at-w.off] ^= 0x01
		p = q
	}
	w.off += len(p)
	return w.ResponseWriter.Write(p)
}

func TestTamperedLayerRejected(t *testing.T) {
	var tamper atomic.Bool
	tamper.Store(true)
	reg := imagetest.NewRegistry(t, imagetest.WithMiddleware(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tamper.Load() && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				w = &tamperWriter{ResponseWriter: w}
			}
			next.ServeHTTP(w, r)
		})
	}))
	// An uncompressed layer: the flipped byte is file content, so only the
	// digest check can notice.
	tarData := imagetest.TarBytes(t, imagetest.Reg("file", strings.Repeat("A", 4096)))
	layer := static.NewLayer(tarData, types.OCIUncompressedLayer)
	ref := reg.Push(t, "tampered:1", imagetest.Image(t, v1.Config{}, layer))
	dir := t.TempDir()
	s := openStore(t, dir, image.Options{})
	_, err := s.Ensure(context.Background(), ref, image.PullMissing)
	if err == nil {
		t.Fatal("a tampered layer was accepted")
	}
	if !strings.Contains(err.Error(), "digest") && !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("not rejected by the digest check: %v", err)
	}
	if n := len(layerDirs(t, dir)); n != 0 {
		t.Fatalf("tampered layer committed (%d dirs)", n)
	}
	tamper.Store(false)
	rfs := ensure(t, s, ref, image.PullMissing)
	if readIn(t, rfs, "file") != strings.Repeat("A", 4096) {
		t.Fatal("content")
	}
}

func TestDuplicateLayersListedOnce(t *testing.T) {
	reg := imagetest.NewRegistry(t)
	a := imagetest.Layer(t, imagetest.Reg("a", "1"))
	b := imagetest.Layer(t, imagetest.Reg("b", "2"))
	ref := reg.Push(t, "dup:1", imagetest.Image(t, v1.Config{}, a, b, a))
	s, _ := newStore(t)
	rfs := ensure(t, s, ref, image.PullMissing)
	if len(rfs.Layers) != 2 || filepath.Base(filepath.Dir(rfs.Layers[0])) == filepath.Base(filepath.Dir(rfs.Layers[1])) {
		t.Fatalf("layers: %v", rfs.Layers)
	}
	if readIn(t, rfs, "a") != "1" || readIn(t, rfs, "b") != "2" {
		t.Fatal("content")
	}
	mnt := mountOverlay(t, rfs.Layers)
	if got := strings.Join(walkNames(mnt), ","); got != "a,b" {
		t.Fatalf("merged: %s", got)
	}
}

// TestLoadNotATar: a file that is no archive at all gets an error that
// names what load accepts, not the tar reader's "invalid tar header".
func TestLoadNotATar(t *testing.T) {
	s, _ := newStore(t)
	p := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(p, []byte("just some text, not an image\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := s.Load(context.Background(), p)
	if err == nil || !strings.Contains(err.Error(), "not a tar archive") || !strings.Contains(err.Error(), "docker save") {
		t.Fatalf("Load of a text file: %v", err)
	}
}

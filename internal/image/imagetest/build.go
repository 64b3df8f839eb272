package imagetest

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Epoch is the modification time File uses when none is given.
func Epoch() time.Time { return time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC) }

// File is one tar entry of a layer built in memory.
type File struct {
	Name string
	// Type is a tar type flag; 0 means a regular file.
	Type     byte
	Body     string
	Mode     int64 // 0 means 0644 for files, 0755 for directories, 0777 for symlinks
	Linkname string
	Uid, Gid int
	// Xattrs become PAX SCHILY.xattr records.
	Xattrs             map[string]string
	ModTime            time.Time
	Devmajor, Devminor int64
}

// Reg is a regular file with content body.
func Reg(name, body string) File { return File{Name: name, Body: body} }

// Dir is a directory.
func Dir(name string) File { return File{Name: name, Type: tar.TypeDir} }

// Symlink is a symbolic link name -> target.
func Symlink(name, target string) File {
	return File{Name: name, Type: tar.TypeSymlink, Linkname: target}
}

// Hardlink is a hard link name to target (a path in the archive).
func Hardlink(name, target string) File {
	return File{Name: name, Type: tar.TypeLink, Linkname: target}
}

// Whiteout deletes path (from lower layers) in OCI form.
func Whiteout(path string) File {
	dir, base := filepath.Split(path)
	return Reg(dir+".wh."+base, "")
}

// Opaque hides the lower layers' contents of directory dir.
func Opaque(dir string) File { return Reg(filepath.Join(dir, ".wh..wh..opq"), "") }

func (f File) header() *tar.Header {
	h := &tar.Header{
		Name: f.Name, Typeflag: f.Type, Mode: f.Mode, Linkname: f.Linkname,
		Uid: f.Uid, Gid: f.Gid, ModTime: f.ModTime, Devmajor: f.Devmajor, Devminor: f.Devminor,
		Format: tar.FormatPAX,
	}
	if h.Typeflag == 0 {
		h.Typeflag = tar.TypeReg
	}
	if h.ModTime.IsZero() {
		h.ModTime = Epoch()
	}
	if h.Mode == 0 {
		switch h.Typeflag {
		case tar.TypeDir:
			h.Mode = 0o755
		case tar.TypeSymlink:
			h.Mode = 0o777
		default:
			h.Mode = 0o644
		}
	}
	if h.Typeflag == tar.TypeReg {
		h.Size = int64(len(f.Body))
	}
	for k, v := range f.Xattrs {
		if h.PAXRecords == nil {
			h.PAXRecords = map[string]string{}
		}
		h.PAXRecords["SCHILY.xattr."+k] = v
	}
	return h
}

// TarBytes returns an uncompressed tar of files, in order.
func TarBytes(t testing.TB, files ...File) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if err := tw.WriteHeader(f.header()); err != nil {
			t.Fatalf("tar %s: %v", f.Name, err)
		}
		if f.header().Typeflag == tar.TypeReg {
			if _, err := io.WriteString(tw, f.Body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Gzip compresses b (fast level).
func Gzip(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Zstd compresses b.
func Zstd(t testing.TB, b []byte) []byte {
	t.Helper()
	zw, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	defer zw.Close()
	return zw.EncodeAll(b, nil)
}

// LayerFromBytes makes a layer from a tar that may already be gzip or
// zstd compressed (the media type follows the compression).
func LayerFromBytes(t testing.TB, b []byte) v1.Layer {
	t.Helper()
	var opts []tarball.LayerOption
	if len(b) >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd {
		opts = append(opts, tarball.WithMediaType(types.OCILayerZStd))
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Layer is a gzip-compressed layer holding files.
func Layer(t testing.TB, files ...File) v1.Layer {
	t.Helper()
	return LayerFromBytes(t, Gzip(t, TarBytes(t, files...)))
}

// ZstdLayer is a zstd-compressed layer holding files.
func ZstdLayer(t testing.TB, files ...File) v1.Layer {
	t.Helper()
	return LayerFromBytes(t, Zstd(t, TarBytes(t, files...)))
}

// LayerFromDir is a gzip-compressed layer of a directory tree (modes,
// symlinks and the caller's ownership as found).
func LayerFromDir(t testing.TB, dir string) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return LayerFromBytes(t, Gzip(t, buf.Bytes()))
}

// RandomLayer is a gzip-compressed layer of nfiles files of random
// (incompressible) content totalling about size bytes, spread over a few
// directories; seed makes it reproducible.
func RandomLayer(t testing.TB, size int64, nfiles int, seed uint64) v1.Layer {
	t.Helper()
	return LayerFromBytes(t, Gzip(t, RandomTar(t, size, nfiles, seed)))
}

// RandomTar is the uncompressed tar of RandomLayer.
func RandomTar(t testing.TB, size int64, nfiles int, seed uint64) []byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	per := size / int64(max(nfiles, 1))
	data := make([]byte, per*2+1)
	for i := 0; i < nfiles; i++ {
		dir := "data/d" + strconv.Itoa(i%8)
		if i < 8 {
			_ = tw.WriteHeader(&tar.Header{Name: dir + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: Epoch()})
		}
		n := per/2 + rng.Int64N(per+1)
		for j := int64(0); j < n; j += 8 {
			v := rng.Uint64()
			for k := int64(0); k < 8 && j+k < n; k++ {
				data[j+k] = byte(v >> (8 * k))
			}
		}
		h := &tar.Header{Name: dir + "/f" + strconv.FormatUint(seed, 10) + "-" + strconv.Itoa(i), Typeflag: tar.TypeReg, Mode: 0o644, Size: n, ModTime: Epoch()}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data[:n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// HostPlatform is linux on this machine's architecture.
func HostPlatform() v1.Platform {
	return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
}

// Image makes a host-platform image of layers (lowest first) with cfg as
// its runtime config.
func Image(t testing.TB, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	return ImageFor(t, HostPlatform(), cfg, layers...)
}

// ImageFor is Image for another platform.
func ImageFor(t testing.TB, p v1.Platform, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Config = cfg
	cf.Created = v1.Time{Time: Epoch()}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// PlatformImage is one entry of Index.
type PlatformImage struct {
	Platform v1.Platform
	Image    v1.Image
}

// Index makes a multi-arch index of images.
func Index(t testing.TB, images ...PlatformImage) v1.ImageIndex {
	t.Helper()
	var adds []mutate.IndexAddendum
	for _, pi := range images {
		p := pi.Platform
		adds = append(adds, mutate.IndexAddendum{Add: pi.Image, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
}

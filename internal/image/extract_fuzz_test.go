//go:build linux

package image

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/image/imagetest"
)

// fuzzEscape is an absolute path hostile seeds aim at; it must never
// appear.
const fuzzEscape = "/tmp/agentkernel-fuzz-escape"

// hostileSeeds are the committed seed corpus of FuzzExtract
// (testdata/fuzz/FuzzExtract), one per escape technique. Regenerate the
// files with AGENTKERNEL_WRITE_CORPUS=1 go test -run TestWriteFuzzCorpus.
func hostileSeeds(t testing.TB) map[string][]byte {
	T := func(files ...imagetest.File) []byte { return imagetest.TarBytes(t, files...) }
	return map[string][]byte{
		"dotdot":              T(imagetest.Reg("../escape", "x"), imagetest.Reg("a/../../escape", "x")),
		"absolute":            T(imagetest.Reg(fuzzEscape, "x"), imagetest.Reg("/../../"+fuzzEscape, "x")),
		"symlink-dir-abs":     T(imagetest.Symlink("evil", "/tmp"), imagetest.Reg("evil/agentkernel-fuzz-escape", "x")),
		"symlink-dir-rel":     T(imagetest.Symlink("evil", "../../../../../tmp"), imagetest.Reg("evil/agentkernel-fuzz-escape", "x")),
		"symlink-dotdot":      T(imagetest.Symlink("up", ".."), imagetest.Reg("up/escape", "x")),
		"symlink-overwrite":   T(imagetest.Symlink("link", fuzzEscape), imagetest.Reg("link", "x")),
		"symlink-chain":       T(imagetest.Symlink("a", "b"), imagetest.Symlink("b", "../.."), imagetest.Reg("a/escape", "x")),
		"symlink-loop":        T(imagetest.Symlink("l", "l"), imagetest.Reg("l/x", "x")),
		"proc-magic":          T(imagetest.Symlink("p", "/proc/self/root/tmp"), imagetest.Reg("p/agentkernel-fuzz-escape", "x")),
		"hardlink-out":        T(imagetest.Hardlink("h", "../../../etc/passwd")),
		"hardlink-abs":        T(imagetest.Hardlink("h", "/etc/passwd"), imagetest.Reg("h", "x")),
		"hardlink-via-link":   T(imagetest.Symlink("d", "/etc"), imagetest.Hardlink("h", "d/hostname")),
		"hardlink-to-symlink": T(imagetest.Symlink("s", fuzzEscape), imagetest.Hardlink("h", "s"), imagetest.Reg("h", "x")),
		"whiteouts": T(imagetest.Whiteout("gone"), imagetest.Opaque("dir"), imagetest.Reg("../.wh.x", ""),
			imagetest.Reg(".wh..", ""), imagetest.Reg(".wh..wh.plnk", "")),
		"devices": T(imagetest.File{Name: "null", Type: tar.TypeChar, Devmajor: 1, Devminor: 3},
			imagetest.File{Name: "sda", Type: tar.TypeBlock, Devmajor: 8}, imagetest.File{Name: "p", Type: tar.TypeFifo}),
		"xattrs": T(imagetest.File{Name: "f", Body: "x", Xattrs: map[string]string{
			"trusted.overlay.redirect": "/etc", "security.capability": "\x00\x00\x00\x02", "user.ok": "1"}}),
		"replace-types": T(imagetest.Dir("d"), imagetest.Reg("d/f", "x"), imagetest.Reg("d", "x"),
			imagetest.Symlink("d", "/"), imagetest.Dir("d"), imagetest.File{Name: "ro", Type: tar.TypeDir, Mode: 0o500},
			imagetest.Reg("ro/x", "y"), imagetest.File{Name: "none", Type: tar.TypeDir, Mode: 0o000}),
		"gzip": imagetest.Gzip(t, T(imagetest.Symlink("evil", "/tmp"), imagetest.Reg("evil/agentkernel-fuzz-escape", "x"))),
		"zstd": imagetest.Zstd(t, T(imagetest.Reg("../escape", "x"))),
	}
}

func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("AGENTKERNEL_WRITE_CORPUS") == "" {
		t.Skip("set AGENTKERNEL_WRITE_CORPUS=1 to rewrite testdata/fuzz/FuzzExtract")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzExtract")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range hostileSeeds(t) {
		body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHostileSeeds runs every seed through the same checks as the fuzzer
// (the committed corpus also runs as part of FuzzExtract).
func TestHostileSeeds(t *testing.T) {
	for name, data := range hostileSeeds(t) {
		t.Run(name, func(t *testing.T) { fuzzOne(t, data) })
	}
}

func FuzzExtract(f *testing.F) {
	f.Add(imagetest.TarBytes(f, imagetest.Dir("a"), imagetest.Reg("a/b", "c"), imagetest.Symlink("l", "a/b")))
	f.Fuzz(fuzzOne)
}

// fuzzOne extracts data (tar, optionally compressed) and checks that
// nothing outside the layer directory changed and nothing panicked.
func fuzzOne(t *testing.T, data []byte) {
	j := newJail(t)
	r, _, release, err := decompress(bytes.NewReader(data))
	if err != nil {
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Ownership as a root store would apply it; no device nodes in /tmp.
	opts := rootOpts()
	opts.maxBytes = 64 << 20
	_, _ = extractTar(ctx, io.LimitReader(r, 16<<20), j.root, opts)
	j.check(t)
	if _, err := os.Lstat(fuzzEscape); err == nil {
		_ = os.Remove(fuzzEscape)
		t.Fatalf("%s was created", fuzzEscape)
	}
	for _, p := range []string{"/escape", filepath.Join(filepath.Dir(j.outer), "escape")} {
		if _, err := os.Lstat(p); err == nil {
			t.Fatal(fmt.Sprintf("%s was created", p))
		}
	}
}

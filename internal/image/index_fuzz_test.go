//go:build linux

package image

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentkernel/agentkernel/internal/image/cache"
	"github.com/agentkernel/agentkernel/internal/image/imagetest"
)

// The fixture store the index fuzzers look things up in: three images
// whose digests share a 12-digit prefix two by two, tags of every shape,
// an image known by its index digest, a dangling untagged one.
var (
	fxDigestA = "sha256:0123456789ab" + strings.Repeat("a", 52)
	fxDigestB = "sha256:0123456789ab" + strings.Repeat("b", 52)
	fxDigestC = "sha256:fedcba987654" + strings.Repeat("c", 52)
	fxIndexC  = "sha256:" + strings.Repeat("9", 64)
	fxLayer1  = "sha256:" + strings.Repeat("1", 64)
	fxLayer2  = "sha256:" + strings.Repeat("2", 64)
	fxConfig  = "sha256:" + strings.Repeat("e", 64)
)

func fixtureIndex() *indexFile {
	idx := newIndex()
	rec := func(d string, layers ...string) *imageRecord {
		r := &imageRecord{Digest: d, MediaType: "application/vnd.oci.image.manifest.v1+json", ConfigDigest: fxConfig,
			Platform: "linux/amd64", Config: Config{Env: []string{"PATH=/bin"}, Cmd: []string{"sh"}}, Source: "pull",
			Pulled: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
		for _, l := range layers {
			r.Layers = append(r.Layers, layerRecord{Digest: l, DiffID: l, Size: 1})
		}
		return r
	}
	idx.Images[fxDigestA] = rec(fxDigestA, fxLayer1)
	idx.Images[fxDigestB] = rec(fxDigestB, fxLayer1, fxLayer2)
	c := rec(fxDigestC, fxLayer2)
	c.IndexDigest, c.Dangling = fxIndexC, true
	idx.Images[fxDigestC] = c
	idx.Tags["index.docker.io/library/alpine:3.20"] = fxDigestA
	idx.Tags["localhost:5000/team/tool:1"] = fxDigestB
	idx.Tags["index.docker.io/library/alpine@"+fxDigestB] = fxDigestB
	idx.Tags["index.docker.io/library/gone:1"] = "sha256:" + strings.Repeat("0", 64) // points at no image
	return idx
}

// fuzzDir is a scratch directory for a fuzz target, on /dev/shm when it
// exists: the store fsyncs what it writes, which costs milliseconds per
// input on a disk and nothing on tmpfs.
func fuzzDir(f *testing.F) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "agentkernel-fuzz-"); err == nil {
			f.Cleanup(func() { _ = os.RemoveAll(dir) })
			return dir
		}
	}
	return f.TempDir()
}

// fixtureStore opens a store under dir holding the fixture index, its
// blobs and layer directories.
func fixtureStore(tb testing.TB, dir string, idx *indexFile) *Store {
	tb.Helper()
	s, err := Open(dir, Options{})
	if err != nil {
		tb.Fatal(err)
	}
	resetFixture(tb, s, idx)
	return s
}

// resetFixture (re)writes idx as index.json, and the blobs and layer
// directories of the fixture images.
func resetFixture(tb testing.TB, s *Store, idx *indexFile) {
	tb.Helper()
	for _, d := range []string{fxDigestA, fxDigestB, fxDigestC, fxConfig} {
		h, _ := v1.NewHash(d)
		if err := os.WriteFile(s.blobPath(h), []byte(`{"fixture":true}`), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	for _, l := range []string{fxLayer1, fxLayer2} {
		h, _ := v1.NewHash(l)
		if err := os.MkdirAll(s.layerFS(h), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	data, err := json.Marshal(idx)
	if err != nil {
		tb.Fatal(err)
	}
	writeIndexBytes(tb, s, data)
}

func writeIndexBytes(tb testing.TB, s *Store, data []byte) {
	tb.Helper()
	// Through a rename, as the store itself writes it, so that the
	// snapshot cache sees a new inode; no fsync: this is a scratch store.
	tmp := s.indexPath() + ".fuzz"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, s.indexPath()); err != nil {
		tb.Fatal(err)
	}
}

// expectLookup resolves ref against idx the way the package documents
// it, independently of snapshot.find: a bare "sha256:" digest or unique
// prefix (12+ lowercase hex digits) of a manifest or index digest; else a
// reference whose canonical form is a tag of an existing image; else a
// digest reference naming an image by manifest or index digest.
func expectLookup(idx *indexFile, ref string) *imageRecord {
	byExact := func(d string) *imageRecord {
		if r := idx.Images[d]; r != nil {
			return r
		}
		for _, r := range idx.Images {
			if r != nil && r.IndexDigest == d {
				return r
			}
		}
		return nil
	}
	if hex, ok := strings.CutPrefix(ref, "sha256:"); ok && len(hex) >= 12 && len(hex) <= 64 && strings.Trim(hex, "0123456789abcdef") == "" {
		if r := byExact(ref); r != nil {
			return r
		}
		var found *imageRecord
		for _, r := range idx.Images {
			if strings.HasPrefix(r.Digest, ref) || (r.IndexDigest != "" && strings.HasPrefix(r.IndexDigest, ref)) {
				if found != nil && found != r {
					return nil
				}
				found = r
			}
		}
		return found
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil
	}
	if d, ok := idx.Tags[r.Name()]; ok && idx.Images[d] != nil {
		return idx.Images[d]
	}
	if dg, ok := r.(name.Digest); ok {
		return byExact(dg.DigestStr())
	}
	return nil
}

// FuzzStoreLookup feeds references to the store's exported lookups
// (Inspect, Ensure with PullNever, twice to exercise the reference
// cache) over the fixture index: each must find exactly the image the
// documented rules name, with its layers, and otherwise fail with
// ErrNotFound; the host image resolves without the store.
func FuzzStoreLookup(f *testing.F) {
	for _, s := range refSeeds {
		f.Add(s)
	}
	for _, s := range []string{fxDigestA, fxDigestB[:19], fxDigestB[:20], fxIndexC, fxIndexC[:20], fxDigestC[:30],
		"alpine:3.20", "localhost:5000/team/tool:1", "alpine@" + fxDigestB, "tool@" + fxIndexC, "gone:1", "SHA256:0123456789ABC"} {
		f.Add(s)
	}
	idx := fixtureIndex()
	s := fixtureStore(f, fuzzDir(f), idx)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, ref string) {
		for round := 0; round < 2; round++ {
			rfs, err := s.Ensure(ctx, ref, PullNever)
			if IsHost(ref) {
				if err != nil || !rfs.Host {
					t.Fatalf("Ensure(%q) = %+v, %v; want the host image", ref, rfs, err)
				}
				return
			}
			want := expectLookup(idx, ref)
			if want == nil {
				if err == nil || !errors.Is(err, ErrNotFound) {
					t.Fatalf("Ensure(%q, never) = %s, %v; want ErrNotFound", ref, rfs.Digest, err)
				}
				if _, err := s.Inspect(ctx, ref); !errors.Is(err, ErrNotFound) {
					t.Fatalf("Inspect(%q) = %v; want ErrNotFound", ref, err)
				}
				if crfs, ok, err := cache.Lookup(filepath.Dir(s.Dir()), ref, cache.MetaFor(IDMap{})); ok || err != nil {
					t.Fatalf("cache.Lookup(%q) = %s, %v, %v; want a miss", ref, crfs.Digest, ok, err)
				}
				continue
			}
			if err != nil || rfs.Digest != want.Digest {
				t.Fatalf("Ensure(%q, never) = %s, %v; want %s", ref, rfs.Digest, err, want.Digest)
			}
			// agentkernel's registry-free lookup finds the same root
			// filesystem wherever it understands the reference.
			crfs, ok, cerr := cache.Lookup(filepath.Dir(s.Dir()), ref, cache.MetaFor(IDMap{}))
			_, normal := cache.Normalize(ref)
			if cerr != nil || ok != (normal || isDigestRef(ref)) || ok && !reflect.DeepEqual(crfs, rfs) {
				t.Fatalf("cache.Lookup(%q) = %+v, %v, %v; Ensure gave %+v", ref, crfs, ok, cerr, rfs)
			}
			var wantLayers []string
			for _, l := range want.Layers {
				h, _ := v1.NewHash(l.DiffID)
				wantLayers = append(wantLayers, s.layerFS(h))
			}
			if !slices.Equal(rfs.Layers, wantLayers) {
				t.Fatalf("Ensure(%q): layers %q, want %q", ref, rfs.Layers, wantLayers)
			}
			d, err := s.Inspect(ctx, ref)
			if err != nil || d.Digest != want.Digest || len(d.Layers) != len(want.Layers) {
				t.Fatalf("Inspect(%q) = %s, %v; want %s", ref, d.Digest, err, want.Digest)
			}
		}
	})
}

// indexSeeds are index.json documents: the fixture, and broken ones.
func indexSeeds(tb testing.TB) map[string][]byte {
	fx, err := json.MarshalIndent(fixtureIndex(), "", " ")
	if err != nil {
		tb.Fatal(err)
	}
	return map[string][]byte{
		"fixture":       fx,
		"empty":         []byte(`{"version":1}`),
		"wrong-version": []byte(`{"version":2,"images":{},"tags":{}}`),
		"bad-diffid":    []byte(`{"version":1,"images":{"sha256:x":{"digest":"sha256:x","layers":[{"diff_id":"sha256:../../etc"}]}}}`),
		"tag-to-nowhere": []byte(`{"version":1,"images":{},"tags":{"index.docker.io/library/a:1":"sha256:` + strings.Repeat("f", 64) +
			`"}}`),
		"not-json":   []byte(`{"version":1,`),
		"wrong-type": []byte(`{"version":"1","images":[]}`),
	}
}

// FuzzIndex parses index.json documents and serves them through the
// store's exported API. parseIndex must round-trip what it accepts; with
// any document as the store's index, List, Inspect, Ensure, Remove and
// Prune must not panic, every listed row must name an image that Inspect
// then finds, and lookups must fail only with errors.
func FuzzIndex(f *testing.F) {
	for _, data := range indexSeeds(f) {
		f.Add(data)
	}
	s := fixtureStore(f, fuzzDir(f), fixtureIndex())
	f.Fuzz(func(t *testing.T, data []byte) { fuzzIndexOne(t, s, data) })
}

func fuzzIndexOne(t *testing.T, s *Store, data []byte) {
	ctx := context.Background()
	{
		idx, err := parseIndex(data)
		if err != nil {
			if idx != nil {
				t.Fatal("an index with an error")
			}
		} else {
			if idx.Version != cache.IndexVersion || idx.Images == nil || idx.Tags == nil {
				t.Fatalf("parsed index %+v", idx)
			}
			out, err := json.Marshal(idx)
			if err != nil {
				t.Fatal(err)
			}
			again, err := parseIndex(out)
			if err != nil || !reflect.DeepEqual(normalizeTimes(again), normalizeTimes(idx)) {
				t.Fatalf("index does not round-trip: %v\n%s", err, out)
			}
			if what := knownIndexBug(idx); what != "" {
				knownBug(t, what)
			}
		}
		resetFixture(t, s, fixtureIndex())
		writeIndexBytes(t, s, data)
		rows, lerr := s.List(ctx)
		if err == nil && lerr != nil && !badDiffID(idx) {
			t.Fatalf("List: %v, but the index parses and its diff IDs are hashes", lerr)
		}
		if err != nil && lerr == nil {
			t.Fatalf("List accepted an index parseIndex rejects (%v)", err)
		}
		if lerr != nil {
			if _, err := s.Ensure(ctx, "alpine:3.20", PullNever); err == nil {
				t.Fatal("Ensure found an image in an unreadable index")
			}
			return
		}
		for i, row := range rows {
			if i == 8 {
				break
			}
			ref := row.Ref
			if ref == "" {
				ref = row.Digest
			}
			if !slices.ContainsFunc(slices.Collect(maps.Values(idx.Images)), func(r *imageRecord) bool { return r.Digest == row.Digest }) {
				t.Fatalf("List row %+v names no image", row)
			}
			// A listed image must be found again under its canonical tag
			// or its digest (hostile, non-canonical tags may not be).
			mustFind := row.Ref == "" && isDigestRef(row.Digest)
			if n, err := NormalizeRef(row.Ref); row.Ref != "" && err == nil && n == row.Ref && !IsHost(row.Ref) {
				mustFind = true
			}
			d, err := s.Inspect(ctx, ref)
			switch {
			case err != nil && errors.Is(err, ErrNotFound) && !mustFind:
			case err != nil && !errors.Is(err, ErrNotFound) && isBlobOrHashError(err):
			case err != nil:
				t.Fatalf("Inspect(%q) of a listed image: %v", ref, err)
			case d.Digest != row.Digest:
				t.Fatalf("Inspect(%q) = %s, List says %s", ref, d.Digest, row.Digest)
			}
			_, _ = s.Ensure(ctx, ref, PullNever)
		}
		for _, ref := range []string{"alpine:3.20", fxDigestA[:20], "gone:1"} {
			_, _ = s.Ensure(ctx, ref, PullNever)
			_, _ = s.Inspect(ctx, ref)
		}
		if len(rows) > 0 {
			ref := rows[0].Ref
			if ref == "" {
				ref = rows[0].Digest
			}
			if _, err := s.Remove(ctx, ref); err != nil && !errors.Is(err, ErrNotFound) {
				t.Logf("Remove(%q): %v", ref, err)
			}
		}
		if _, err := s.Prune(ctx, nil); err != nil {
			t.Logf("Prune: %v", err)
		}
	}
}

// TestFixedBugs runs the inputs of bugs that fuzzing found (and that are
// fixed) through the fuzz checks, so that they stay fixed.
func TestFixedBugs(t *testing.T) {
	s := fixtureStore(t, t.TempDir(), fixtureIndex())
	l1 := `{"diff_id":"` + fxLayer1 + `"}`
	for name, data := range map[string]string{
		// An image that has the same layer twice (e.g. two identical
		// empty layers): a real image loaded by 'images load' shows it.
		"RepeatedLayer": `{"version":1,"images":{"` + fxDigestA + `":{"digest":"` + fxDigestA + `","config_digest":"` + fxConfig +
			`","layers":[` + l1 + `,` + l1 + `]}},"tags":{"index.docker.io/library/a:1":"` + fxDigestA + `"}}`,
		"DigestNotKey": `{"version":1,"images":{"":{"digest":"sha256:000000000000","layers":[` + l1 + `]}}}`,
		"NullRecord":   `{"version":1,"images":{"` + fxDigestA + `":null}}`,
	} {
		t.Run(name, func(t *testing.T) { fuzzIndexOne(t, s, []byte(data)) })
	}
}

// knownIndexBug names a reported, unfixed bug idx would trigger, or "".
func knownIndexBug(idx *indexFile) string {
	for key, rec := range idx.Images {
		if rec == nil {
			// "images": {"sha256:…": null} makes every store operation
			// (List, Inspect, Ensure, so every run) dereference nil in
			// loadSnapshot (store.go) and byDigest (index.go).
			return "a null image record in index.json panics every store operation"
		}
		if key != rec.Digest && len(rec.Layers) > 0 {
			// loadSnapshot keys layerPaths by the map key, Inspect looks
			// them up by rec.Digest and indexes the (then nil) slice
			// with the layer number (list.go:144).
			return "Inspect panics on an image record whose digest differs from its key in index.json"
		}
		// Repeated diff IDs are legitimate (Inspect once panicked on
		// them); the Inspect calls below cover them.
	}
	return ""
}

// badDiffID reports whether some layer of idx has a diff ID that is not
// a hash (the store refuses such an index when it loads it).
func badDiffID(idx *indexFile) bool {
	for _, r := range idx.Images {
		for _, l := range r.Layers {
			if _, err := v1.NewHash(l.DiffID); err != nil {
				return true
			}
		}
	}
	return false
}

// isBlobOrHashError reports errors Inspect may rightly return for a
// hostile index: a missing or unnamable blob.
func isBlobOrHashError(err error) bool {
	s := err.Error()
	for _, w := range []string{"blob", "hash", "hex", "digest", "no such file"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// normalizeTimes drops time zones (a parsed "+01:00" and a re-parsed one
// are equal instants with distinct *Location values).
func normalizeTimes(idx *indexFile) *indexFile {
	for _, r := range idx.Images {
		if r != nil {
			r.Created, r.Pulled = r.Created.UTC(), r.Pulled.UTC()
		}
	}
	return idx
}

// knownBug marks the inputs of a bug that was found by fuzzing and fixed:
// seeing one again is a regression.
func knownBug(t *testing.T, what string) {
	t.Helper()
	t.Fatalf("regression of a fixed bug: %s", what)
}

// FuzzStoreMeta: Open accepts a store.json exactly when it describes a
// store of this format unpacked by this kind of caller with no id map,
// and never rewrites an existing one.
func FuzzStoreMeta(f *testing.F) {
	root := os.Geteuid() == 0
	for _, s := range []string{
		fmt.Sprintf(`{"version":1,"id_map":{"uid":0,"gid":0,"size":0},"privileged":%v,"owner_uid":%d}`, root, os.Geteuid()),
		fmt.Sprintf(`{"version":1,"privileged":%v,"owner_uid":%d}`, !root, os.Geteuid()),
		`{"version":1,"id_map":{"uid":100000,"gid":100000,"size":65536},"privileged":true}`,
		`{"version":2}`, `{}`, `null`, `[]`, `{"version":1e0,"privileged":true}`, `{"VERSION":1,"Privileged":true}`, "",
	} {
		f.Add([]byte(s))
	}
	base := fuzzDir(f)
	n := 0
	f.Fuzz(func(t *testing.T, data []byte) {
		n++
		dir := filepath.Join(base, fmt.Sprint(n))
		if err := os.MkdirAll(filepath.Join(dir, "images"), 0o700); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		p := filepath.Join(dir, "images", "store.json")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := Open(dir, Options{})
		if s != nil {
			_ = s.Close()
		}
		var m struct {
			Version    int   `json:"version"`
			IDMap      IDMap `json:"id_map"`
			Privileged bool  `json:"privileged"`
			Owner      int   `json:"owner_uid"`
		}
		valid := json.Unmarshal(data, &m) == nil && m.Version == cache.Format && m.Privileged == root && m.IDMap.IsZero() &&
			(root || m.Owner == os.Geteuid())
		if (err == nil) != valid {
			t.Fatalf("Open with store.json %q: %v, but valid=%v", data, err, valid)
		}
		if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
			t.Fatalf("Open rewrote store.json %q as %q", data, got)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "image store") {
			t.Fatalf("error not prefixed: %v", err)
		}
	})
}

// FuzzLayerMeta: readLayerMeta never fails (layer.json is informative),
// falls back to just the diff ID when the file is not a layer.json, and
// what it returns survives a JSON round trip.
func FuzzLayerMeta(f *testing.F) {
	for _, s := range []string{
		`{"diff_id":"sha256:` + strings.Repeat("1", 64) + `","compression":"gzip","size":10,"tar_size":20,"stats":{},"unpacked":"2026-01-02T03:04:05Z"}`,
		`{"size":-1,"tar_size":1e3}`, `{"unpacked":"yesterday"}`, `[]`, `null`, ``, `{"stats":null}`,
	} {
		f.Add([]byte(s))
	}
	s := fixtureStore(f, fuzzDir(f), fixtureIndex())
	h, _ := v1.NewHash(fxLayer1)
	p := filepath.Join(s.layerDir(h), "layer.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := s.readLayerMeta(h)
		if err != nil {
			t.Fatalf("readLayerMeta: %v", err)
		}
		var probe layerMeta
		if json.Unmarshal(data, &probe) != nil && !reflect.DeepEqual(m, layerMeta{DiffID: fxLayer1}) {
			t.Fatalf("unparsable layer.json %q gave %+v", data, m)
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var back layerMeta
		if err := json.Unmarshal(out, &back); err != nil || !back.Unpacked.Equal(m.Unpacked) {
			t.Fatalf("round trip: %v", err)
		}
		back.Unpacked, m.Unpacked = time.Time{}, time.Time{}
		if !reflect.DeepEqual(back, m) {
			t.Fatalf("round trip: %+v, was %+v", back, m)
		}
	})
}

// FuzzDockerSaveManifest loads `docker save` trees whose manifest.json is
// the fuzz input (config and one layer are real): it must never panic,
// must fail with an error naming what is wrong, and every image it loads
// must then be listed and inspectable under its tags.
func FuzzDockerSaveManifest(f *testing.F) {
	layer := imagetest.TarBytes(f, imagetest.Reg("etc/hello", "hi\n"))
	diffID := sha256Hash(layer)
	cfg, err := json.Marshal(v1.ConfigFile{OS: "linux", Architecture: "amd64", RootFS: v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{diffID}}})
	if err != nil {
		f.Fatal(err)
	}
	fsys := fstest.MapFS{
		"config.json": &fstest.MapFile{Data: cfg},
		"layer.tar":   &fstest.MapFile{Data: layer},
		"sub/x.tar":   &fstest.MapFile{Data: layer},
	}
	for _, s := range []string{
		`[{"Config":"config.json","RepoTags":["fuzz/load:1"],"Layers":["layer.tar"]}]`,
		`[{"Config":"/config.json","RepoTags":["a:1","b:2"],"Layers":["./sub/../layer.tar"]}]`,
		`[{"Config":"config.json","RepoTags":[],"Layers":["layer.tar"]}]`,
		`[{"Config":"config.json","RepoTags":["host"],"Layers":["layer.tar"]}]`,
		`[{"Config":"config.json","RepoTags":["Bad Tag"],"Layers":["layer.tar"]}]`,
		`[{"Config":"config.json","Layers":["layer.tar","layer.tar"]}]`,
		`[{"Config":"../config.json","Layers":["../../layer.tar"]}]`,
		`[]`, `{}`, `null`, `[null]`, `[{"Config":"missing.json"}]`,
	} {
		f.Add([]byte(s))
	}
	s, err := Open(fuzzDir(f), Options{})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys["manifest.json"] = &fstest.MapFile{Data: data}
		out, err := s.loadDockerSave(ctx, fsys, "fuzz.tar")
		if err != nil {
			if out != nil {
				t.Fatalf("summaries %v with error %v", out, err)
			}
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if len(out) == 0 {
			t.Fatal("loaded nothing without an error")
		}
		defer func() {
			for _, sum := range out {
				_, _ = s.Remove(ctx, sum.Digest)
			}
		}()
		if sn, err := s.current(); err != nil {
			t.Fatal(err)
		} else if what := knownIndexBug(sn.Index); what != "" {
			knownBug(t, what)
		}
		for _, sum := range out {
			ref := sum.Ref
			if ref == "" {
				ref = sum.Digest
			} else if n, err := NormalizeRef(ref); err != nil || n != ref {
				t.Fatalf("loaded under a tag that is not canonical: %q", ref)
			}
			d, err := s.Inspect(ctx, ref)
			if err != nil || d.Digest != sum.Digest {
				t.Fatalf("Inspect(%q) after load: %v", ref, err)
			}
			for _, l := range d.Layers {
				if !l.Present {
					t.Fatalf("layer %s of %s missing after load", l.DiffID, ref)
				}
			}
		}
		if _, err := s.List(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

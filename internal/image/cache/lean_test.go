package cache

import (
	"encoding/json"
	"reflect"
	"testing"
)

const leanIndexSeed = `{
 "version": 1,
 "images": {
  "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa": {
   "digest": "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
   "index_digest": "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc",
   "media_type": "application/vnd.oci.image.manifest.v1+json",
   "config_digest": "sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd",
   "platform": "linux/amd64",
   "layers": [
    {"digest": "sha256:1111111111111111111111111111111111111111111111111111111111111111", "diff_id": "sha256:2222222222222222222222222222222222222222222222222222222222222222", "media_type": "application/vnd.oci.image.layer.v1.tar+gzip", "size": 10, "unpacked_size": 20},
    {"digest": "sha256:3333333333333333333333333333333333333333333333333333333333333333", "diff_id": "sha256:4444444444444444444444444444444444444444444444444444444444444444", "size": 1, "unpacked_size": 2}
   ],
   "config": {"env": ["PATH=/usr/bin", "A=b c"], "entrypoint": ["/bin/sh", "-c"], "cmd": ["echo hi"], "working_dir": "/w", "user": "1000:1000"},
   "size": 11,
   "unpacked_size": 22,
   "created": "2026-11-20T10:00:00Z",
   "pulled": "2026-11-24T10:00:00.123456789+01:00",
   "source": "registry"
  },
  "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb": {
   "digest": "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
   "layers": [],
   "config": {},
   "pulled": "0001-01-01T00:00:00Z",
   "dangling": true
  }
 },
 "tags": {
  "index.docker.io/library/alpine:3.20": "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  "localhost:5000/tool:1": "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
 }
}`

const leanMetaSeed = `{"version": 1, "id_map": {"uid": 100000, "gid": 100000, "size": 65536}, "privileged": true, "owner_uid": 0}`

// TestLeanIndex: on what the store writes, the lean decoding finds
// exactly what ParseIndex finds, field for field where it reads one.
func TestLeanIndex(t *testing.T) {
	full, err := ParseIndex([]byte(leanIndexSeed))
	if err != nil {
		t.Fatal(err)
	}
	lean, err := parseIndexLean([]byte(leanIndexSeed))
	if err != nil {
		t.Fatal(err)
	}
	if len(lean.Images) != 2 || len(lean.Tags) != 2 {
		t.Fatalf("lean: %d images, %d tags", len(lean.Images), len(lean.Tags))
	}
	assertLeanAgrees(t, full, lean)
	// A record keyed by another letter case is read by encoding/json;
	// the lean decoding refuses the index rather than read it otherwise.
	if _, err := parseIndexLean([]byte(`{"version": 1, "images": {"sha256:x": {"Digest": "sha256:x"}}}`)); err == nil {
		t.Fatal("a Digest key was accepted")
	}
	if _, err := parseIndexLean([]byte(`{"version": 2, "images": {}}`)); err == nil {
		t.Fatal("version 2 was accepted")
	}
}

func TestLeanMeta(t *testing.T) {
	var want Meta
	if err := json.Unmarshal([]byte(leanMetaSeed), &want); err != nil {
		t.Fatal(err)
	}
	got, err := decodeMetaLean([]byte(leanMetaSeed))
	if err != nil || got != want {
		t.Fatalf("decodeMetaLean = %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{`{"id_map": {"uid": 4294967296}}`, `{"version": "1"}`, `{"privileged": 1}`, `{"ID_MAP": {}}`, `[]`} {
		if m, err := decodeMetaLean([]byte(bad)); err == nil {
			t.Errorf("decodeMetaLean(%s) = %+v, want an error", bad, m)
		}
	}
}

// FuzzLeanIndex holds the lean decoding to ParseIndex: it never panics,
// and wherever both succeed they agree on every image, its digests,
// layers and config, and every tag.
func FuzzLeanIndex(f *testing.F) {
	for _, s := range []string{leanIndexSeed, `{}`, `null`, `{"version":1}`, `{"version":1,"images":null,"tags":null}`,
		`{"version":1,"images":{"sha256:x":null},"tags":{"a":null}}`, `{"version":1.0,"images":{"d":{"digest":"d","layers":[null]}}}`,
		`{"version":1,"images":{"d":{"digest":"d","config":{"env":[null,"x"]}}}}`, `{"version":1,"images":{"d":{"digest":"e"}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lean, lerr := parseIndexLean(data)
		full, ferr := ParseIndex(data)
		if lerr != nil || ferr != nil {
			return
		}
		assertLeanAgrees(t, full, lean)
	})
}

// FuzzLeanMeta holds decodeMetaLean to json.Unmarshal into Meta.
func FuzzLeanMeta(f *testing.F) {
	for _, s := range []string{leanMetaSeed, `{}`, `null`, `{"id_map":null}`, `{"owner_uid":-1}`, `{"version":1e0}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lean, lerr := decodeMetaLean(data)
		var full Meta
		if err := json.Unmarshal(data, &full); err != nil || lerr != nil {
			return
		}
		if lean != full {
			t.Fatalf("%s: lean %+v, json %+v", data, lean, full)
		}
	})
}

func assertLeanAgrees(t *testing.T, full, lean *Index) {
	t.Helper()
	if lean.Version != full.Version || len(lean.Images) != len(full.Images) {
		t.Fatalf("lean: version %d, %d images; full: version %d, %d images", lean.Version, len(lean.Images), full.Version, len(full.Images))
	}
	for d, l := range lean.Images {
		f := full.Images[d]
		if f == nil {
			t.Fatalf("lean has %s, full does not", d)
		}
		if l.Digest != f.Digest || l.IndexDigest != f.IndexDigest || !reflect.DeepEqual(l.Config, f.Config) || len(l.Layers) != len(f.Layers) {
			t.Fatalf("image %s: lean %+v, full %+v", d, l, f)
		}
		for i := range l.Layers {
			if l.Layers[i].DiffID != f.Layers[i].DiffID {
				t.Fatalf("image %s layer %d: lean %s, full %s", d, i, l.Layers[i].DiffID, f.Layers[i].DiffID)
			}
		}
	}
	for tag, d := range full.Tags {
		if d != "" && lean.Tags[tag] != d {
			t.Fatalf("tag %s: lean %q, full %q", tag, lean.Tags[tag], d)
		}
	}
	for tag, d := range lean.Tags {
		if full.Tags[tag] != d {
			t.Fatalf("tag %s: lean %q, full %q", tag, d, full.Tags[tag])
		}
	}
}

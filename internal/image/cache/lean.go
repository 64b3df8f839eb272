package cache

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// Lookup runs at the start of every `agentkernel run`, in a fresh process,
// where encoding/json's first decode into a struct type pays for the
// reflection over that type (and for bringing that part of encoding/json
// into memory), which a decode into generic values does not. Lookup
// therefore decodes store.json and index.json into `any` and takes out
// what a run needs; the image store proper (package image) keeps the
// struct decoding, ParseIndex. This second decoder is kept for what
// bench/cmd/indexdecode measures (bench/README.md, "The image index on a
// run's path"): ParseIndex in its place makes every run slower by that
// much.
//
// The lean decoding is held to the struct decoding by FuzzLeanIndex: what
// it returns agrees with ParseIndex wherever ParseIndex succeeds. It may
// find less (a record keyed in another letter case, which encoding/json
// matches and which only a damaged index has, is an error here): Lookup
// then misses and the full store decides. It does not check fields it
// does not use.

// parseIndexLean is ParseIndex for Lookup: the records it returns carry
// only their digests, their layers' diff IDs and the image config.
func parseIndexLean(data []byte) (*Index, error) {
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	top, err := jsonObject(doc, "version", "images", "tags")
	if err != nil {
		return nil, err
	}
	idx := &Index{Images: map[string]*Record{}, Tags: map[string]string{}}
	if idx.Version, err = jsonInt(top, "version"); err != nil {
		return nil, err
	}
	images, err := jsonObject(top["images"])
	if err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	for d, v := range images {
		if v == nil {
			continue // dropped, as ParseIndex drops a null record
		}
		rec, err := leanRecord(v)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", d, err)
		}
		idx.Images[d] = rec
	}
	tags, err := jsonObject(top["tags"])
	if err != nil {
		return nil, fmt.Errorf("tags: %w", err)
	}
	for t, v := range tags {
		s, ok := v.(string)
		if !ok {
			if v == nil {
				continue // a null tag points nowhere
			}
			return nil, fmt.Errorf("tag %s: not a string", t)
		}
		idx.Tags[t] = s
	}
	return idx.check()
}

func leanRecord(v any) (*Record, error) {
	r, err := jsonObject(v, "digest", "index_digest", "media_type", "config_digest", "platform", "layers",
		"config", "size", "unpacked_size", "created", "pulled", "source", "dangling")
	if err != nil {
		return nil, err
	}
	rec := &Record{}
	if rec.Digest, err = jsonString(r, "digest"); err != nil {
		return nil, err
	}
	if rec.IndexDigest, err = jsonString(r, "index_digest"); err != nil {
		return nil, err
	}
	layers, ok := r["layers"].([]any)
	if !ok && r["layers"] != nil {
		return nil, fmt.Errorf("layers: not an array")
	}
	for _, lv := range layers {
		l, err := jsonObject(lv, "digest", "diff_id", "media_type", "size", "unpacked_size")
		if err != nil {
			return nil, fmt.Errorf("layer: %w", err)
		}
		var lr LayerRecord
		if lr.DiffID, err = jsonString(l, "diff_id"); err != nil {
			return nil, err
		}
		rec.Layers = append(rec.Layers, lr)
	}
	c, err := jsonObject(r["config"], "env", "entrypoint", "cmd", "working_dir", "user")
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	for _, f := range []struct {
		key string
		to  *[]string
	}{{"env", &rec.Config.Env}, {"entrypoint", &rec.Config.Entrypoint}, {"cmd", &rec.Config.Cmd}} {
		if *f.to, err = jsonStrings(c, f.key); err != nil {
			return nil, err
		}
	}
	if rec.Config.WorkingDir, err = jsonString(c, "working_dir"); err != nil {
		return nil, err
	}
	if rec.Config.User, err = jsonString(c, "user"); err != nil {
		return nil, err
	}
	return rec, nil
}

// decodeMetaLean decodes store.json like json.Unmarshal into Meta.
func decodeMetaLean(data []byte) (Meta, error) {
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		return Meta{}, err
	}
	top, err := jsonObject(doc, "version", "id_map", "privileged", "owner_uid")
	if err != nil {
		return Meta{}, err
	}
	var m Meta
	if m.Version, err = jsonInt(top, "version"); err != nil {
		return Meta{}, err
	}
	if m.Owner, err = jsonInt(top, "owner_uid"); err != nil {
		return Meta{}, err
	}
	if p, ok := top["privileged"]; ok && p != nil {
		b, ok := p.(bool)
		if !ok {
			return Meta{}, fmt.Errorf("privileged: not a boolean")
		}
		m.Privileged = b
	}
	idm, err := jsonObject(top["id_map"], "uid", "gid", "size")
	if err != nil {
		return Meta{}, fmt.Errorf("id_map: %w", err)
	}
	for _, f := range []struct {
		key string
		to  *uint32
	}{{"uid", &m.IDMap.UID}, {"gid", &m.IDMap.GID}, {"size", &m.IDMap.Size}} {
		n, err := jsonInt(idm, f.key)
		if err != nil {
			return Meta{}, err
		}
		if n < 0 || uint64(n) > math.MaxUint32 {
			return Meta{}, fmt.Errorf("%s: %d out of range", f.key, n)
		}
		*f.to = uint32(n)
	}
	return m, nil
}

// jsonObject is v as a JSON object; null is an empty one. known are the
// keys the struct decoding would match: a key that differs from one of
// them only in letter case (encoding/json matches it regardless) is an
// error rather than a silently different reading.
func jsonObject(v any, known ...string) (map[string]any, error) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("not an object")
	}
	for k := range m {
		for _, want := range known {
			if k != want && strings.EqualFold(k, want) {
				return nil, fmt.Errorf("key %q: only %q is read here", k, want)
			}
		}
	}
	return m, nil
}

// jsonString is m[key] as a string; absent or null is "".
func jsonString(m map[string]any, key string) (string, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: not a string", key)
	}
	return s, nil
}

// jsonStrings is m[key] as a list of strings; absent or null is nil.
func jsonStrings(m map[string]any, key string) ([]string, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return nil, nil
	}
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: not an array", key)
	}
	out := make([]string, len(a))
	for i, e := range a {
		if e == nil {
			continue // null decodes to "" in a []string
		}
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("%s: not an array of strings", key)
		}
		out[i] = s
	}
	return out, nil
}

// jsonInt is m[key] as an integer (a JSON number without a fraction that
// fits an int); absent or null is 0.
func jsonInt(m map[string]any, key string) (int, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return 0, nil
	}
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) || f < math.MinInt32 || f > math.MaxUint32 {
		return 0, fmt.Errorf("%s: not an integer", key)
	}
	return int(f), nil
}

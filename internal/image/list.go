package image

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentkernel/agentkernel/internal/image/cache"
)

// ImageSummary is one row of List: an image under one of its tags.
type ImageSummary struct {
	// Ref is the full tag reference ("" for an untagged image).
	Ref string `json:"ref,omitempty"`
	// Repository and Tag split Ref ("index.docker.io/library/alpine",
	// "3.20"); a digest reference has an empty Tag.
	Repository string `json:"repository"`
	Tag        string `json:"tag"`
	// Digest is the manifest digest.
	Digest string `json:"digest"`
	// Platform is "os/arch[/variant]".
	Platform string `json:"platform"`
	// Size is the unpacked size of the image's layers in bytes.
	Size int64 `json:"size"`
	// Pulled is when the image entered the store.
	Pulled time.Time `json:"pulled"`
}

func summaryOf(rec *imageRecord, ref string) ImageSummary {
	s := ImageSummary{Ref: ref, Digest: rec.Digest, Platform: rec.Platform, Size: rec.UnpackedSize, Pulled: rec.Pulled}
	if ref == "" {
		return s
	}
	if r, err := name.ParseReference(ref); err == nil {
		s.Repository = r.Context().Name()
		if t, ok := r.(name.Tag); ok {
			s.Tag = t.TagStr()
		}
	} else {
		s.Repository = ref
	}
	return s
}

// List returns every cached image, one row per tag plus one per
// untagged image, sorted by repository and tag.
func (s *Store) List(ctx context.Context) ([]ImageSummary, error) {
	sn, err := s.current()
	if err != nil {
		return nil, err
	}
	idx := sn.Index
	var out []ImageSummary
	tagged := map[string]bool{}
	for t, d := range idx.Tags {
		rec := idx.Images[d]
		if rec == nil {
			continue
		}
		tagged[d] = true
		out = append(out, summaryOf(rec, t))
	}
	for d, rec := range idx.Images {
		if !tagged[d] {
			out = append(out, summaryOf(rec, ""))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Repository != b.Repository {
			return a.Repository < b.Repository
		}
		if a.Tag != b.Tag {
			return a.Tag < b.Tag
		}
		return a.Digest < b.Digest
	})
	return out, nil
}

// LayerInfo describes one layer of an inspected image.
type LayerInfo struct {
	Digest       string `json:"digest"`
	DiffID       string `json:"diff_id"`
	MediaType    string `json:"media_type"`
	Size         int64  `json:"size"`
	UnpackedSize int64  `json:"unpacked_size"`
	// Path is the unpacked layer directory (the overlay lowerdir).
	Path string `json:"path"`
	// Present is false when the directory is missing (pruned or
	// damaged); Ensure then pulls again.
	Present bool `json:"present"`
}

// ImageDetails is what Inspect reports about one image.
type ImageDetails struct {
	Digest       string      `json:"digest"`
	IndexDigest  string      `json:"index_digest,omitempty"`
	MediaType    string      `json:"media_type"`
	ConfigDigest string      `json:"config_digest"`
	Tags         []string    `json:"tags"`
	Platform     string      `json:"platform"`
	Size         int64       `json:"size"`
	UnpackedSize int64       `json:"unpacked_size"`
	Created      time.Time   `json:"created,omitzero"`
	Pulled       time.Time   `json:"pulled"`
	Source       string      `json:"source"`
	Config       Config      `json:"config"`
	Layers       []LayerInfo `json:"layers"`
	// Manifest and ImageConfig are the stored documents, verbatim.
	Manifest    json.RawMessage `json:"manifest"`
	ImageConfig json.RawMessage `json:"image_config"`
}

// Inspect describes a cached image named by tag, digest reference or
// "sha256:" digest (prefix). It wraps ErrNotFound when there is none.
func (s *Store) Inspect(ctx context.Context, ref string) (ImageDetails, error) {
	sn, err := s.current()
	if err != nil {
		return ImageDetails{}, err
	}
	_, rec := sn.Find(ref, s.refKey)
	if rec == nil {
		return ImageDetails{}, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	d := ImageDetails{
		Digest: rec.Digest, IndexDigest: rec.IndexDigest, MediaType: rec.MediaType,
		ConfigDigest: rec.ConfigDigest, Tags: sn.Index.TagsOf(rec.Digest), Platform: rec.Platform,
		Size: rec.Size, UnpackedSize: rec.UnpackedSize, Created: rec.Created, Pulled: rec.Pulled,
		Source: rec.Source, Config: rec.Config,
	}
	sort.Strings(d.Tags)
	if d.Tags == nil {
		d.Tags = []string{}
	}
	for _, l := range rec.Layers {
		li := LayerInfo{Digest: l.Digest, DiffID: l.DiffID, MediaType: l.MediaType, Size: l.Size, UnpackedSize: l.UnpackedSize}
		// Every layer, repeats included, is described by its own diff
		// ID (the snapshot's path list holds each layer once).
		if h, err := v1.NewHash(l.DiffID); err == nil {
			li.Path = s.layerFS(h)
			li.Present = exists(li.Path)
		}
		d.Layers = append(d.Layers, li)
	}
	if d.Manifest, err = s.readBlob(rec.Digest); err != nil {
		return d, err
	}
	if d.ImageConfig, err = s.readBlob(rec.ConfigDigest); err != nil {
		return d, err
	}
	return d, nil
}

// RemoveResult says what Remove did.
type RemoveResult struct {
	// Untagged lists the references removed.
	Untagged []string `json:"untagged"`
	// Deleted is the digest of the image record deleted, if its last
	// reference went; its layers stay until Prune.
	Deleted string `json:"deleted,omitempty"`
}

// Remove untags ref; when the image has no tags left (or ref names it by
// digest) its record, manifest and config are deleted too. Layers are
// left for Prune, since running sandboxes may still use them.
func (s *Store) Remove(ctx context.Context, ref string) (RemoveResult, error) {
	if IsHost(ref) {
		return RemoveResult{}, fmt.Errorf("the host image is not stored and cannot be removed")
	}
	var res RemoveResult
	err := s.updateIndex(ctx, func(idx *indexFile) error {
		sn := &cache.Snapshot{Index: idx}
		key, rec := sn.Find(ref, normalize)
		if rec == nil {
			return fmt.Errorf("%w: %s", ErrNotFound, ref)
		}
		byDigest := key == "" || strings.Contains(key, "@")
		if !byDigest {
			delete(idx.Tags, key)
			res.Untagged = append(res.Untagged, key)
		}
		rest := idx.TagsOf(rec.Digest)
		if byDigest {
			sort.Strings(rest)
			for _, t := range rest {
				delete(idx.Tags, t)
			}
			res.Untagged = append(res.Untagged, rest...)
			rest = nil
		}
		if len(rest) == 0 {
			delete(idx.Images, rec.Digest)
			res.Deleted = rec.Digest
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	if res.Deleted != "" {
		s.pruneBlobs(false)
	}
	return res, nil
}

// PruneResult says what Prune removed.
type PruneResult struct {
	Images []string `json:"images"` // dangling images removed
	Layers int      `json:"layers"`
	Blobs  int      `json:"blobs"`
	// Bytes is the unpacked size of the layers removed.
	Bytes int64 `json:"bytes"`
	// Temporary counts leftovers of interrupted pulls removed.
	Temporary int `json:"temporary"`
	// Kept counts the layers no image uses that were kept because a
	// persistent sandbox or a snapshot still stacks them; KeptFor names
	// those (the StackedLayers answer's users, sorted, each once).
	Kept    int      `json:"kept"`
	KeptFor []string `json:"kept_for,omitempty"`
}

// StackedLayers says which layer directories something outside the
// store stacks (persistent sandboxes and snapshots record the paths of
// their image's layers in their specs): each path, as recorded, with
// who stacks it. Prune keeps those layers.
type StackedLayers func(ctx context.Context) (map[string][]string, error)

// stackedDiffIDs maps the store's layers among paths (<...>/layers/
// sha256/<hex>/fs, or the layer's directory) to their users, by diff ID,
// whichever data directory path they were recorded under.
func stackedDiffIDs(paths map[string][]string) map[string][]string {
	out := map[string][]string{}
	for p, users := range paths {
		p = filepath.Clean(p)
		if filepath.Base(p) == "fs" {
			p = filepath.Dir(p)
		}
		hex, alg := filepath.Base(p), filepath.Base(filepath.Dir(p))
		if filepath.Base(filepath.Dir(filepath.Dir(p))) != "layers" || alg != "sha256" {
			continue
		}
		id := alg + ":" + hex
		for _, u := range users {
			if !slices.Contains(out[id], u) {
				out[id] = append(out[id], u)
			}
		}
	}
	return out
}

// Prune removes dangling images (whose tag moved to a newer pull),
// unpacked layers no image uses and nothing stacks (stacked, which may
// be nil when nothing outside the store can stack a layer), unreferenced
// blobs and leftovers of interrupted pulls. It waits for pulls and loads
// in progress (in any process) to finish and holds them off while it
// runs. An error from stacked removes nothing.
func (s *Store) Prune(ctx context.Context, stacked StackedLayers) (PruneResult, error) {
	var res PruneResult
	unlock, err := flock(ctx, s.lockPath("gc"), false)
	if err != nil {
		return res, err
	}
	defer unlock()
	var users map[string][]string
	if stacked != nil {
		paths, err := stacked(ctx)
		if err != nil {
			return res, fmt.Errorf("finding the layers sandboxes and snapshots stack (nothing pruned): %w", err)
		}
		users = stackedDiffIDs(paths)
	}
	used := map[string]bool{}
	err = s.updateIndex(ctx, func(idx *indexFile) error {
		for d, rec := range idx.Images {
			if rec.Dangling && len(idx.TagsOf(d)) == 0 {
				delete(idx.Images, d)
				res.Images = append(res.Images, d)
			}
		}
		for _, rec := range idx.Images {
			for _, l := range rec.Layers {
				used[l.DiffID] = true
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	sort.Strings(res.Images)
	entries, err := os.ReadDir(s.path("layers", "sha256"))
	if err != nil {
		return res, err
	}
	for _, e := range entries {
		h := v1.Hash{Algorithm: "sha256", Hex: e.Name()}
		if used[h.String()] {
			continue
		}
		if u := users[h.String()]; len(u) > 0 {
			res.Kept++
			for _, w := range u {
				if !slices.Contains(res.KeptFor, w) {
					res.KeptFor = append(res.KeptFor, w)
				}
			}
			continue
		}
		n, err := s.removeLayer(h)
		if err != nil {
			return res, fmt.Errorf("removing layer %s: %w", h, err)
		}
		res.Layers++
		res.Bytes += n
	}
	// With gc.lock held exclusively no pull or load is running, so
	// everything in tmp/ is a leftover.
	if tmps, err := os.ReadDir(s.path("tmp")); err == nil {
		for _, e := range tmps {
			if removeAll(s.path("tmp", e.Name())) == nil {
				res.Temporary++
			}
		}
	}
	sort.Strings(res.KeptFor)
	res.Blobs = s.pruneBlobs(true)
	return res, nil
}

// pruneBlobs deletes manifests and configs no image record refers to.
// Unless the caller holds gc.lock exclusively, blobs written in the last
// minute are spared: a pull writes them just before recording its image.
func (s *Store) pruneBlobs(exclusive bool) int {
	idx, err := s.readIndex()
	if err != nil {
		return 0
	}
	keep := map[string]bool{}
	for _, rec := range idx.Images {
		keep[rec.Digest] = true
		keep[rec.ConfigDigest] = true
	}
	dir := s.path("blobs", "sha256")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || keep["sha256:"+e.Name()] {
			continue
		}
		// A pull writes blobs before it records the image; spare recent ones.
		if fi, err := e.Info(); !exclusive && err == nil && time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		if os.Remove(filepath.Join(dir, e.Name())) == nil {
			n++
		}
	}
	return n
}

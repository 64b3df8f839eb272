package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/agentkernel/agentkernel/internal/image/cache"
)

// Annotations that name an image in an OCI layout.
const (
	annotationRefName        = "org.opencontainers.image.ref.name"
	annotationContainerdName = "io.containerd.image.name"
)

// Load brings images from a `docker save` tarball (compressed or not), an
// OCI image layout directory, or a tar of one, into the store, and
// returns what it loaded (one entry per tag; untagged images once). Names
// come from the tarball's RepoTags, or from an OCI layout's
// "io.containerd.image.name" annotation or a full reference in
// "org.opencontainers.image.ref.name"; a bare tag there ("latest") names
// no repository, so such images are loaded untagged and can be used by
// digest. Multi-arch indexes in a layout resolve to the store's platform.
func (s *Store) Load(ctx context.Context, path string) ([]ImageSummary, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	var fsys fs.FS
	if fi.IsDir() {
		fsys = os.DirFS(path)
	} else {
		tfs, cleanup, err := s.openTarFS(path)
		if err != nil {
			if errors.Is(err, tar.ErrHeader) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("load %s: not a tar archive (or a truncated one): expected a docker save tarball or an OCI image layout (directory or tar, optionally gzip or zstd)", path)
			}
			return nil, fmt.Errorf("load %s: %w", path, err)
		}
		defer cleanup()
		fsys = tfs
	}
	display := filepath.Base(path)
	var out []ImageSummary
	switch {
	case fileExists(fsys, "manifest.json"):
		out, err = s.loadDockerSave(ctx, fsys, display)
	case fileExists(fsys, "index.json") && fileExists(fsys, "oci-layout"):
		out, err = s.loadOCILayout(ctx, fsys, display)
	default:
		return nil, fmt.Errorf("load %s: neither a docker save tarball (manifest.json) nor an OCI image layout (oci-layout, index.json)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	return out, nil
}

func fileExists(fsys fs.FS, name string) bool {
	_, err := fs.Stat(fsys, name)
	return err == nil
}

// openTarFS indexes a tar file, first decompressing it into the store's
// tmp/ when it is gzip or zstd compressed.
func (s *Store) openTarFS(path string) (*tarFS, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	r, compression, release, err := decompress(f)
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	if compression == compressionNone {
		release()
		t, err := newTarFS(f)
		if err != nil {
			_ = f.Close()
			return nil, nil, err
		}
		return t, func() { _ = f.Close() }, nil
	}
	tmp, err := os.CreateTemp(s.path("tmp"), "load-*.tar")
	if err != nil {
		release()
		_ = f.Close()
		return nil, nil, err
	}
	cleanup := func() {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
	}
	_, err = io.Copy(tmp, r)
	release()
	_ = f.Close()
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("decompressing: %w", err)
	}
	t, err := newTarFS(tmp)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return t, cleanup, nil
}

// dockerSaveEntry is one image in a docker save manifest.json.
type dockerSaveEntry struct {
	Config   string
	RepoTags []string
	Layers   []string
}

func (s *Store) loadDockerSave(ctx context.Context, fsys fs.FS, display string) ([]ImageSummary, error) {
	data, err := fs.ReadFile(fsys, "manifest.json")
	if err != nil {
		return nil, err
	}
	var entries []dockerSaveEntry
	if err := json.Unmarshal(data, &entries); err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("manifest.json lists no images")
	}
	var out []ImageSummary
	for _, e := range entries {
		cfg, err := fs.ReadFile(fsys, cleanFSName(e.Config))
		if err != nil {
			return nil, fmt.Errorf("config %s: %w", e.Config, err)
		}
		src := &imageSource{display: display, verb: "loading", source: "load", config: cfg}
		for _, l := range e.Layers {
			name := cleanFSName(l)
			fi, err := fs.Stat(fsys, name)
			if err != nil {
				return nil, fmt.Errorf("layer %s: %w", l, err)
			}
			src.layers = append(src.layers, layerJob{
				size: fi.Size(),
				open: func() (io.ReadCloser, error) { return fsys.Open(name) },
			})
		}
		tags, err := normalizeTags(e.RepoTags)
		if err != nil {
			return nil, err
		}
		rec, err := s.storeImage(ctx, src, tags)
		if err != nil {
			return nil, err
		}
		out = append(out, summaries(rec, tags)...)
	}
	return out, nil
}

func normalizeTags(refs []string) ([]string, error) {
	var tags []string
	for _, t := range refs {
		n, err := NormalizeRef(t)
		if err != nil {
			return nil, err
		}
		if n == HostRef {
			return nil, fmt.Errorf("the name %q is reserved for the host image", t)
		}
		tags = append(tags, n)
	}
	return tags, nil
}

// layoutName returns the image name an OCI layout descriptor carries, or
// "" when it carries none (or only a bare tag).
func layoutName(d v1.Descriptor) string {
	if n := d.Annotations[annotationContainerdName]; n != "" {
		return n
	}
	n := d.Annotations[annotationRefName]
	if strings.ContainsAny(n, "/:@") {
		return n
	}
	return ""
}

func readLayoutBlob(fsys fs.FS, h v1.Hash) ([]byte, error) {
	data, err := fs.ReadFile(fsys, "blobs/"+h.Algorithm+"/"+h.Hex)
	if err != nil {
		return nil, err
	}
	if got := sha256Hash(data); h.Algorithm == "sha256" && got != h {
		return nil, fmt.Errorf("blob %s has digest %s", h, got)
	}
	return data, nil
}

func (s *Store) loadOCILayout(ctx context.Context, fsys fs.FS, display string) ([]ImageSummary, error) {
	data, err := fs.ReadFile(fsys, "index.json")
	if err != nil {
		return nil, err
	}
	top, err := v1.ParseIndexManifest(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	type pending struct {
		manifest    v1.Descriptor
		indexDigest string
		tags        []string
	}
	byDigest := map[string]*pending{}
	var order []string
	for _, d := range top.Manifests {
		desc, indexDigest := d, ""
		if d.MediaType.IsIndex() {
			raw, err := readLayoutBlob(fsys, d.Digest)
			if err != nil {
				return nil, err
			}
			im, err := v1.ParseIndexManifest(bytes.NewReader(raw))
			if err != nil {
				return nil, fmt.Errorf("index %s: %w", d.Digest, err)
			}
			if desc, err = pickManifest(im, s.platform); err != nil {
				return nil, err
			}
			indexDigest = d.Digest.String()
		} else if !d.MediaType.IsImage() {
			continue
		}
		p := byDigest[desc.Digest.String()]
		if p == nil {
			p = &pending{manifest: desc, indexDigest: indexDigest}
			byDigest[desc.Digest.String()] = p
			order = append(order, desc.Digest.String())
		}
		if n := layoutName(d); n != "" {
			tags, err := normalizeTags([]string{n})
			if err != nil {
				return nil, err
			}
			p.tags = append(p.tags, tags...)
		}
	}
	if len(order) == 0 {
		return nil, fmt.Errorf("index.json lists no images")
	}
	var out []ImageSummary
	for _, dg := range order {
		p := byDigest[dg]
		raw, err := readLayoutBlob(fsys, p.manifest.Digest)
		if err != nil {
			return nil, err
		}
		m, err := v1.ParseManifest(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("manifest %s: %w", dg, err)
		}
		cfg, err := readLayoutBlob(fsys, m.Config.Digest)
		if err != nil {
			return nil, err
		}
		src := &imageSource{
			display: display, verb: "loading", source: "load",
			manifest: raw, digest: p.manifest.Digest, indexDigest: p.indexDigest, config: cfg,
		}
		for _, l := range m.Layers {
			if !isLayerType(l.MediaType) {
				return nil, fmt.Errorf("manifest %s: not a container image: layer media type %s", dg, l.MediaType)
			}
			name := "blobs/" + l.Digest.Algorithm + "/" + l.Digest.Hex
			src.layers = append(src.layers, layerJob{
				digest: l.Digest, size: l.Size, mediaType: string(l.MediaType),
				open: func() (io.ReadCloser, error) { return fsys.Open(name) },
			})
		}
		rec, err := s.storeImage(ctx, src, p.tags)
		if err != nil {
			return nil, err
		}
		out = append(out, summaries(rec, p.tags)...)
	}
	return out, nil
}

// Import makes an image named ref from a root filesystem tarball (plain,
// gzip or zstd), like `docker import`: one layer, a config with the
// default PATH and no command, for the store's platform.
func (s *Store) Import(ctx context.Context, tarPath, ref string) (ImageSummary, error) {
	tags, err := normalizeTags([]string{ref})
	if err != nil {
		return ImageSummary{}, err
	}
	if _, err := os.Stat(tarPath); err != nil {
		return ImageSummary{}, err
	}
	unlockGC, err := flock(ctx, s.lockPath("gc"), true)
	if err != nil {
		return ImageSummary{}, err
	}
	defer unlockGC()
	open := func() (io.ReadCloser, error) { return os.Open(tarPath) }
	tmp, meta, err := s.unpackToTemp(ctx, "import-", layerJob{open: open}, nil)
	if err != nil {
		return ImageSummary{}, fmt.Errorf("import %s: %w", tarPath, err)
	}
	diffID, _ := v1.NewHash(meta.DiffID)
	unlock, err := flock(ctx, s.lockPath("layer-"+diffID.Hex), false)
	if err != nil {
		_ = removeAll(tmp)
		return ImageSummary{}, err
	}
	err = s.commitLayer(tmp, diffID)
	unlock()
	if err != nil {
		_ = removeAll(tmp)
		return ImageSummary{}, err
	}
	now := time.Now().UTC()
	cfg := v1.ConfigFile{
		Architecture: s.platform.Architecture,
		OS:           s.platform.OS,
		Variant:      s.platform.Variant,
		Created:      v1.Time{Time: now},
		Config:       v1.Config{Env: []string{cache.HostPath}},
		RootFS:       v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{diffID}},
		History:      []v1.History{{Created: v1.Time{Time: now}, CreatedBy: "agentkernel images import " + filepath.Base(tarPath)}},
	}
	if cfg.Architecture == "" {
		cfg.Architecture = runtime.GOARCH
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return ImageSummary{}, err
	}
	src := &imageSource{
		display: filepath.Base(tarPath), verb: "importing", source: "import", config: raw,
		layers: []layerJob{{size: meta.TarSize, mediaType: string(types.OCIUncompressedLayer), open: open}},
	}
	rec, err := s.storeImage(ctx, src, tags)
	if err != nil {
		return ImageSummary{}, fmt.Errorf("import %s: %w", tarPath, err)
	}
	return summaries(rec, tags)[0], nil
}

// summaries renders a record as List rows for the given tags (one
// untagged row when there are none).
func summaries(rec *imageRecord, tags []string) []ImageSummary {
	if len(tags) == 0 {
		return []ImageSummary{summaryOf(rec, "")}
	}
	sort.Strings(tags)
	out := make([]ImageSummary, 0, len(tags))
	for _, t := range tags {
		out = append(out, summaryOf(rec, t))
	}
	return out
}

package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/agentkernel/agentkernel/internal/image/cache"
)

// ExportSource is an image to make out of a stack of unpacked layer
// directories in overlayfs form, such as a snapshot's: some of them the
// store's own layers (an image's), the others kept elsewhere (the
// snapshot's). Each directory becomes an OCI layer tar: overlayfs
// whiteouts become ".wh." entries, opaque directories ".wh..wh..opq",
// owners go back to the image's ids.
type ExportSource struct {
	// Layers are the directories, lowest first.
	Layers []string
	// IDMap is the shift their owners were stored with (the Rootfs's).
	IDMap IDMap
	// BaseDigest is the manifest digest of the image the stack starts
	// from: its config (environment, command, working directory,
	// labels, history) is the new image's, with the added layers. When
	// the store no longer has it, Config is used.
	BaseDigest string
	Config     Config
	// CreatedBy is the history line of each layer added to the base.
	CreatedBy string
	// Created is the image's creation time (the snapshot's): with it,
	// two exports of one snapshot are the same image, digest included.
	Created time.Time
}

// ErrNotExportable marks a layer an image cannot describe (a file named
// like a whiteout, overlayfs redirects, a nesting too deep).
var ErrNotExportable = errors.New("not exportable")

func (s *Store) layerTarOpts(src ExportSource) layerTarOptions {
	o := layerTarOptions{idmap: src.IDMap, rootless: !s.privileged, ownerUID: os.Getuid(), ownerGID: os.Getgid()}
	if o.rootless {
		o.sub = callerSubRanges()
	}
	return o
}

// callerSubRanges reads the caller's first ranges of /etc/subuid and
// /etc/subgid (by user name or uid), at most 65535 ids each, as the
// native backend maps a rootless sandbox's ids 1… onto them.
func callerSubRanges() subRanges {
	uid := os.Getuid()
	name := ""
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		name = u.Username
	}
	var r subRanges
	if st, n, ok := subRange("/etc/subuid", name, uid); ok {
		if gs, gn, ok := subRange("/etc/subgid", name, uid); ok {
			r = subRanges{uidStart: st, uidCount: n, gidStart: gs, gidCount: gn}
		}
	}
	return r
}

func subRange(path, name string, uid int) (start, count uint32, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(strings.TrimSpace(line), ":")
		if len(f) != 3 || f[0] == "" || (f[0] != name && f[0] != strconv.Itoa(uid)) {
			continue
		}
		st, err1 := strconv.ParseUint(f[1], 10, 32)
		n, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil || n == 0 || st+n > 1<<32-1 {
			continue
		}
		return uint32(st), uint32(min(n, 65535)), true
	}
	return 0, 0, false
}

// storeLayer returns the diff ID of a layer directory that is one of
// the store's own (<root>/layers/sha256/<hex>/fs), present.
func (s *Store) storeLayer(dir string) (v1.Hash, bool) {
	rel, err := filepath.Rel(s.path("layers"), filepath.Clean(dir))
	if err != nil {
		return v1.Hash{}, false
	}
	parts := strings.Split(rel, string(filepath.Separator))
	if len(parts) != 3 || parts[2] != "fs" {
		return v1.Hash{}, false
	}
	h, err := v1.NewHash(parts[0] + ":" + parts[1])
	if err != nil || s.layerFS(h) != filepath.Clean(dir) || !s.haveLayer(h) {
		return v1.Hash{}, false
	}
	return h, true
}

// exportConfig is the image config of src whose layers have diffIDs:
// the base image's, or one made from src.Config.
func (s *Store) exportConfig(src ExportSource, diffIDs []v1.Hash) ([]byte, error) {
	now := src.Created.UTC().Truncate(time.Second)
	if src.Created.IsZero() {
		now = time.Now().UTC().Truncate(time.Second)
	}
	var cfg *v1.ConfigFile
	base := 0
	if src.BaseDigest != "" {
		if idx, err := s.readIndex(); err == nil {
			if rec := idx.Images[src.BaseDigest]; rec != nil && len(rec.Layers) <= len(diffIDs) {
				if raw, err := s.readBlob(rec.ConfigDigest); err == nil {
					if c, err := v1.ParseConfigFile(bytes.NewReader(raw)); err == nil {
						cfg, base = c, len(rec.Layers)
					}
				}
			}
		}
	}
	if cfg == nil {
		cfg = &v1.ConfigFile{
			Architecture: s.platform.Architecture, OS: s.platform.OS, Variant: s.platform.Variant,
			Config: v1.Config{Env: src.Config.Env, Entrypoint: src.Config.Entrypoint, Cmd: src.Config.Cmd,
				WorkingDir: src.Config.WorkingDir, User: src.Config.User},
		}
		if cfg.Architecture == "" {
			cfg.Architecture = runtime.GOARCH
		}
		if len(cfg.Config.Env) == 0 {
			cfg.Config.Env = []string{cache.HostPath}
		}
	}
	// One history entry per layer that is not marked empty: the base's
	// when they add up, else one per layer.
	nonEmpty := 0
	for _, h := range cfg.History {
		if !h.EmptyLayer {
			nonEmpty++
		}
	}
	if nonEmpty != base {
		cfg.History = nil
		base = 0
	}
	for i := base; i < len(diffIDs); i++ {
		cfg.History = append(cfg.History, v1.History{Created: v1.Time{Time: now}, CreatedBy: src.CreatedBy})
	}
	cfg.Created = v1.Time{Time: now}
	cfg.Container, cfg.DockerVersion = "", ""
	cfg.RootFS = v1.RootFS{Type: "layers", DiffIDs: diffIDs}
	return json.Marshal(cfg)
}

// layerReader streams dir's layer tar through a pipe; a failure ends
// the stream with its error.
func (s *Store) layerReader(ctx context.Context, dir string, o layerTarOptions, w func(io.Writer) io.Writer) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		var out io.Writer = pw
		if w != nil {
			out = w(pw)
		}
		pw.CloseWithError(writeLayerTar(ctx, dir, out, o))
	}()
	return pr
}

// Commit records src as the image ref in the store, like a pull: the
// store's own layers are used as they are, each other layer is written
// as a tar and unpacked by the store's extractor (as any image's), so
// that what the image holds is what a pulled image could.
func (s *Store) Commit(ctx context.Context, src ExportSource, ref string) (ImageSummary, error) {
	tags, err := normalizeTags([]string{ref})
	if err != nil {
		return ImageSummary{}, err
	}
	if isDigestRef(tags[0]) {
		return ImageSummary{}, fmt.Errorf("%q: an image made here needs a tag, not a digest", ref)
	}
	unlockGC, err := flock(ctx, s.lockPath("gc"), true)
	if err != nil {
		return ImageSummary{}, err
	}
	defer unlockGC()
	o := s.layerTarOpts(src)
	diffIDs := make([]v1.Hash, len(src.Layers))
	jobs := make([]layerJob, len(src.Layers))
	for i, dir := range src.Layers {
		never := func() (io.ReadCloser, error) { return nil, errors.New("layer vanished from the store") }
		if h, ok := s.storeLayer(dir); ok {
			diffIDs[i], jobs[i] = h, layerJob{open: never}
			continue
		}
		open := func() (io.ReadCloser, error) { return s.layerReader(ctx, dir, o, nil), nil }
		tmp, meta, err := s.unpackToTemp(ctx, "export-", layerJob{open: open}, nil)
		if err != nil {
			return ImageSummary{}, fmt.Errorf("layer %d: %w", i+1, err)
		}
		h, err := v1.NewHash(meta.DiffID)
		if err != nil {
			_ = removeAll(tmp)
			return ImageSummary{}, err
		}
		unlock, err := flock(ctx, s.lockPath("layer-"+h.Hex), false)
		if err != nil {
			_ = removeAll(tmp)
			return ImageSummary{}, err
		}
		err = s.commitLayer(tmp, h)
		unlock()
		if err != nil {
			_ = removeAll(tmp)
			return ImageSummary{}, err
		}
		diffIDs[i], jobs[i] = h, layerJob{size: meta.TarSize, mediaType: string(types.OCIUncompressedLayer), open: never}
	}
	raw, err := s.exportConfig(src, diffIDs)
	if err != nil {
		return ImageSummary{}, err
	}
	rec, err := s.storeImage(ctx, &imageSource{display: ref, verb: "exporting", source: "snapshot", config: raw, layers: jobs}, tags)
	if err != nil {
		return ImageSummary{}, err
	}
	return summaries(rec, tags)[0], nil
}

// WriteArchive writes src as a `docker save` tarball of the image ref
// to w, which `docker load`, `podman load`, skopeo (docker-archive:) and
// `images load` read. Every layer is an uncompressed tar, written twice:
// once for its digest, which the archive's manifest names first, and
// once into w, checked against that digest.
func (s *Store) WriteArchive(ctx context.Context, src ExportSource, ref string, w io.Writer) error {
	if _, err := normalizeTags([]string{ref}); err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("%q: an archive names its image by a tag: %w", ref, err)
	}
	o := s.layerTarOpts(src)
	img := &exportImage{}
	diffIDs := make([]v1.Hash, len(src.Layers))
	for i, dir := range src.Layers {
		h := sha256.New()
		cw := &countWriter{w: h}
		if err := writeLayerTar(ctx, dir, cw, o); err != nil {
			return err
		}
		l := &exportLayer{digest: hashOf(h), size: cw.n}
		l.open = func() io.ReadCloser {
			return s.layerReader(ctx, dir, o, func(w io.Writer) io.Writer { return &verifyWriter{w: w, want: l.digest, size: l.size, h: sha256.New()} })
		}
		img.layers = append(img.layers, l)
		diffIDs[i] = l.digest
	}
	if img.config, err = s.exportConfig(src, diffIDs); err != nil {
		return err
	}
	return tarball.Write(tag, img, w)
}

func hashOf(h hash.Hash) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", h.Sum(nil))}
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// verifyWriter passes a layer's second write on and fails it when it
// grows past, or ends short of, the first one's size or digest.
type verifyWriter struct {
	w    io.Writer
	want v1.Hash
	size int64
	n    int64
	h    hash.Hash
}

func (v *verifyWriter) Write(p []byte) (int, error) {
	if v.n+int64(len(p)) > v.size {
		return 0, fmt.Errorf("%w: a layer changed while it was exported", ErrNotExportable)
	}
	v.h.Write(p)
	v.n += int64(len(p))
	if v.n == v.size && hashOf(v.h) != v.want {
		return 0, fmt.Errorf("%w: a layer changed while it was exported", ErrNotExportable)
	}
	return v.w.Write(p)
}

// exportLayer is one uncompressed layer of an exported image: its
// digest is its diff ID.
type exportLayer struct {
	digest v1.Hash
	size   int64
	open   func() io.ReadCloser
}

func (l *exportLayer) Digest() (v1.Hash, error)             { return l.digest, nil }
func (l *exportLayer) DiffID() (v1.Hash, error)             { return l.digest, nil }
func (l *exportLayer) Compressed() (io.ReadCloser, error)   { return l.open(), nil }
func (l *exportLayer) Uncompressed() (io.ReadCloser, error) { return l.open(), nil }
func (l *exportLayer) Size() (int64, error)                 { return l.size, nil }
func (l *exportLayer) MediaType() (types.MediaType, error) {
	return types.OCIUncompressedLayer, nil
}

// exportImage is the v1.Image that WriteArchive hands to
// go-containerregistry's tarball writer.
type exportImage struct {
	config []byte
	layers []*exportLayer
}

func (i *exportImage) Layers() ([]v1.Layer, error) {
	out := make([]v1.Layer, len(i.layers))
	for k, l := range i.layers {
		out[k] = l
	}
	return out, nil
}
func (i *exportImage) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (i *exportImage) Size() (int64, error) {
	b, err := i.RawManifest()
	return int64(len(b)), err
}
func (i *exportImage) ConfigName() (v1.Hash, error) { return sha256Hash(i.config), nil }
func (i *exportImage) ConfigFile() (*v1.ConfigFile, error) {
	return v1.ParseConfigFile(bytes.NewReader(i.config))
}
func (i *exportImage) RawConfigFile() ([]byte, error) { return i.config, nil }
func (i *exportImage) Digest() (v1.Hash, error) {
	b, err := i.RawManifest()
	return sha256Hash(b), err
}
func (i *exportImage) Manifest() (*v1.Manifest, error) {
	m := &v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        v1.Descriptor{MediaType: types.OCIConfigJSON, Digest: sha256Hash(i.config), Size: int64(len(i.config))},
	}
	for _, l := range i.layers {
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: types.OCIUncompressedLayer, Digest: l.digest, Size: l.size})
	}
	return m, nil
}
func (i *exportImage) RawManifest() ([]byte, error) {
	m, _ := i.Manifest()
	return json.Marshal(m)
}
func (i *exportImage) LayerByDigest(h v1.Hash) (v1.Layer, error) {
	for _, l := range i.layers {
		if l.digest == h {
			return l, nil
		}
	}
	return nil, fmt.Errorf("no layer %s", h)
}
func (i *exportImage) LayerByDiffID(h v1.Hash) (v1.Layer, error) { return i.LayerByDigest(h) }

var _ v1.Image = (*exportImage)(nil)

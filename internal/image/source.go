package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/errgroup"

	"github.com/agentkernel/agentkernel/internal/atomicfile"
)

// imageSource is one image to bring into the store, from a registry, a
// docker save tarball, an OCI layout or a root filesystem tarball.
type imageSource struct {
	display string // what the user named, for progress lines
	verb    string // "pulling", "loading", "importing"
	source  string // "pull", "load", "import"

	// manifest is the raw manifest; nil means synthesize one after
	// unpacking (docker save and import carry no manifest of their own).
	manifest    []byte
	digest      v1.Hash // expected manifest digest; zero: computed
	indexDigest string
	config      []byte
	layers      []layerJob
}

func sha256Hash(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// isLayerType reports whether a manifest layer is a filesystem layer we
// can unpack (not, say, a Helm chart or an attestation).
func isLayerType(mt types.MediaType) bool {
	switch mt {
	case types.DockerLayer, types.DockerUncompressedLayer, types.DockerForeignLayer,
		types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer,
		types.OCIRestrictedLayer, types.OCIUncompressedRestrictedLayer:
		return true
	}
	return false
}

// storeImage unpacks the layers src is missing, writes its manifest and
// config blobs and records it (with tags) in the index.
func (s *Store) storeImage(ctx context.Context, src *imageSource, tags []string) (*imageRecord, error) {
	unlockGC, err := flock(ctx, s.lockPath("gc"), true)
	if err != nil {
		return nil, err
	}
	defer unlockGC()

	cfg, err := v1.ParseConfigFile(bytes.NewReader(src.config))
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	if cfg.RootFS.Type != "" && cfg.RootFS.Type != "layers" {
		return nil, fmt.Errorf("image config: rootfs type %q is not supported", cfg.RootFS.Type)
	}
	cfgDigest := sha256Hash(src.config)
	var manifest *v1.Manifest
	if src.manifest != nil {
		if manifest, err = v1.ParseManifest(bytes.NewReader(src.manifest)); err != nil {
			return nil, fmt.Errorf("image manifest: %w", err)
		}
		if manifest.Config.Digest != cfgDigest {
			return nil, fmt.Errorf("image config has digest %s, the manifest says %s", cfgDigest, manifest.Config.Digest)
		}
	}
	if len(src.layers) != len(cfg.RootFS.DiffIDs) {
		return nil, fmt.Errorf("image has %d layers but its config lists %d diff IDs", len(src.layers), len(cfg.RootFS.DiffIDs))
	}
	jobs := src.layers
	var missingBytes int64
	missing := 0
	for i := range jobs {
		jobs[i].diffID = cfg.RootFS.DiffIDs[i]
		if !s.haveLayer(jobs[i].diffID) {
			missing++
			missingBytes += jobs[i].size
		}
	}

	prog := s.newProgress(ctx, src.verb, src.display)
	prog.begin(missing, missingBytes)
	metas := make([]layerMeta, len(jobs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.opts.Downloads)
	for i, job := range jobs {
		if s.haveLayer(job.diffID) {
			m, err := s.readLayerMeta(job.diffID)
			if err == nil {
				metas[i] = m
				continue
			}
		}
		g.Go(func() error {
			wrap, done := prog.layer(job)
			m, err := s.ensureLayer(gctx, job, wrap)
			done(err)
			if err != nil {
				return fmt.Errorf("layer %s: %w", job.shortName(), err)
			}
			metas[i] = m
			return nil
		})
	}
	err = g.Wait()
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		prog.end(err)
		return nil, err
	}

	mediaType := types.OCIManifestSchema1
	if manifest == nil {
		manifest = synthesizeManifest(cfgDigest, int64(len(src.config)), metas)
		if src.manifest, err = json.Marshal(manifest); err != nil {
			return nil, err
		}
	} else if manifest.MediaType != "" {
		mediaType = manifest.MediaType
	}
	digest := sha256Hash(src.manifest)
	if src.digest.Hex != "" && digest != src.digest {
		return nil, fmt.Errorf("manifest has digest %s, expected %s", digest, src.digest)
	}
	if err := s.writeBlob(cfgDigest, src.config); err != nil {
		return nil, err
	}
	if err := s.writeBlob(digest, src.manifest); err != nil {
		return nil, err
	}
	rec := &imageRecord{
		Digest:       digest.String(),
		IndexDigest:  src.indexDigest,
		MediaType:    string(mediaType),
		ConfigDigest: cfgDigest.String(),
		Platform:     configPlatform(cfg),
		Config: Config{
			Env:        cfg.Config.Env,
			Entrypoint: cfg.Config.Entrypoint,
			Cmd:        cfg.Config.Cmd,
			WorkingDir: cfg.Config.WorkingDir,
			User:       cfg.Config.User,
		},
		Created: cfg.Created.Time.UTC(),
		Pulled:  time.Now().UTC().Truncate(time.Second),
		Source:  src.source,
	}
	for i, l := range manifest.Layers {
		rec.Layers = append(rec.Layers, layerRecord{
			Digest:       l.Digest.String(),
			DiffID:       jobs[i].diffID.String(),
			MediaType:    string(l.MediaType),
			Size:         l.Size,
			UnpackedSize: metas[i].Stats.Bytes,
		})
		rec.Size += l.Size
		rec.UnpackedSize += metas[i].Stats.Bytes
	}
	err = s.updateIndex(ctx, func(idx *indexFile) error {
		if old := idx.Images[rec.Digest]; old != nil && old.IndexDigest != "" && rec.IndexDigest == "" {
			rec.IndexDigest = old.IndexDigest
		}
		idx.Images[rec.Digest] = rec
		for _, t := range tags {
			idx.SetTag(t, rec.Digest)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	prog.end(nil)
	return rec, nil
}

func (j layerJob) shortName() string {
	h := j.digest
	if h.Hex == "" {
		h = j.diffID
	}
	if len(h.Hex) > 12 {
		return h.Hex[:12]
	}
	return h.Hex
}

// synthesizeManifest describes an image whose source had no manifest:
// every layer as an uncompressed tar, whose digest is its diff ID.
func synthesizeManifest(cfgDigest v1.Hash, cfgSize int64, metas []layerMeta) *v1.Manifest {
	m := &v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        v1.Descriptor{MediaType: types.OCIConfigJSON, Digest: cfgDigest, Size: cfgSize},
	}
	for _, meta := range metas {
		h, _ := v1.NewHash(meta.DiffID)
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: types.OCIUncompressedLayer, Digest: h, Size: meta.TarSize})
	}
	return m
}

func configPlatform(cfg *v1.ConfigFile) string {
	p := v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
	if p.OS == "" {
		p.OS = "linux"
	}
	if p.Architecture == "" {
		p.Architecture = "unknown"
	}
	return p.String()
}

// writeBlob stores a manifest or config by digest (once).
func (s *Store) writeBlob(h v1.Hash, data []byte) error {
	p := s.blobPath(h)
	if _, err := os.Lstat(p); err == nil {
		// Refresh its time: Remove spares blobs written in the last
		// minute, which this one now is, for the image being recorded.
		now := time.Now()
		if os.Chtimes(p, now, now) == nil {
			return nil
		}
	}
	if err := atomicfile.WriteFile(p, data, 0o644); err != nil {
		return fmt.Errorf("storing blob %s: %w", h, err)
	}
	return nil
}

// readBlob reads a stored manifest or config.
func (s *Store) readBlob(d string) ([]byte, error) {
	h, err := v1.NewHash(d)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(s.blobPath(h))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("blob %s is missing from the store", d)
	}
	return data, err
}

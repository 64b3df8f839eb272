package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentkernel/agentkernel/internal/atomicfile"
)

// layerJob is one layer to unpack: where its (possibly compressed) bytes
// come from and what they must hash to.
type layerJob struct {
	// digest is the expected digest of the stream open returns; zero for
	// sources that only promise the diff ID (docker save, import).
	digest    v1.Hash
	diffID    v1.Hash // zero when unknown (import): computed
	size      int64
	mediaType string
	open      func() (io.ReadCloser, error)
	// verified is set when open's stream checks digest itself (remote
	// blobs, verified by go-containerregistry at EOF): hashing it a
	// second time would only cost CPU.
	verified bool
}

// layerMeta is layer.json, written inside a layer directory before it is
// renamed into place.
type layerMeta struct {
	DiffID      string       `json:"diff_id"`
	Digest      string       `json:"digest,omitempty"`
	MediaType   string       `json:"media_type,omitempty"`
	Compression string       `json:"compression"`
	Size        int64        `json:"size"`     // bytes read from the source
	TarSize     int64        `json:"tar_size"` // uncompressed tar bytes
	Stats       extractStats `json:"stats"`
	Unpacked    time.Time    `json:"unpacked"`
}

func (s *Store) extractOpts() extractOptions {
	if s.privileged {
		return privilegedExtract(s.opts.IDMap)
	}
	return extractOptions{}
}

// haveLayer reports whether the layer with this diff ID is unpacked.
func (s *Store) haveLayer(diffID v1.Hash) bool {
	_, err := os.Lstat(s.layerDir(diffID))
	return err == nil
}

// readLayerMeta reads an unpacked layer's layer.json. The file is only
// informational (sizes, counts): when it is unreadable the layer is still
// used, with its sizes unknown.
func (s *Store) readLayerMeta(diffID v1.Hash) (layerMeta, error) {
	m := layerMeta{DiffID: diffID.String()}
	data, err := os.ReadFile(filepath.Join(s.layerDir(diffID), "layer.json"))
	if err == nil {
		err = json.Unmarshal(data, &m)
	}
	if err != nil {
		s.log.Warn("unreadable layer metadata", "layer", diffID.String(), "err", err)
		m = layerMeta{DiffID: diffID.String()}
	}
	return m, nil
}

// ensureLayer unpacks job's layer unless it already is, holding the
// layer's lock so that concurrent pulls (in any process) fetch it once.
func (s *Store) ensureLayer(ctx context.Context, job layerJob, wrap func(io.Reader) io.Reader) (layerMeta, error) {
	if s.haveLayer(job.diffID) {
		return s.readLayerMeta(job.diffID)
	}
	unlock, err := flock(ctx, s.lockPath("layer-"+job.diffID.Hex), false)
	if err != nil {
		return layerMeta{}, err
	}
	defer unlock()
	if s.haveLayer(job.diffID) {
		return s.readLayerMeta(job.diffID)
	}
	s.removeStaleTemps("layer-" + job.diffID.Hex + "-")
	tmp, meta, err := s.unpackToTemp(ctx, "layer-"+job.diffID.Hex+"-", job, wrap)
	if err != nil {
		return layerMeta{}, err
	}
	if err := s.commitLayer(tmp, job.diffID); err != nil {
		_ = removeAll(tmp)
		return layerMeta{}, err
	}
	return meta, nil
}

// removeStaleTemps removes leftovers of earlier attempts (a crash, a
// kill) at unpacking one layer; the caller holds that layer's lock.
func (s *Store) removeStaleTemps(prefix string) {
	entries, err := os.ReadDir(s.path("tmp"))
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			_ = removeAll(s.path("tmp", e.Name()))
		}
	}
}

// hashingReader counts and (unless h is nil) hashes what passes through
// it.
type hashingReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if n > 0 {
		if h.h != nil {
			h.h.Write(p[:n])
		}
		h.n += int64(n)
	}
	return n, err
}

func (h *hashingReader) digest() v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.h.Sum(nil))}
}

// unpackToTemp streams the layer into a new directory under tmp/,
// verifying the stream digest and the diff ID, and syncs it. It returns
// the directory, ready to be renamed into layers/.
func (s *Store) unpackToTemp(ctx context.Context, prefix string, job layerJob, wrap func(io.Reader) io.Reader) (dir string, meta layerMeta, err error) {
	dir, err = os.MkdirTemp(s.path("tmp"), prefix)
	if err != nil {
		return "", meta, err
	}
	defer func() {
		if err != nil {
			_ = removeAll(dir)
			dir = ""
		}
	}()
	fsDir := filepath.Join(dir, "fs")
	if err = os.Mkdir(fsDir, 0o755); err != nil {
		return dir, meta, err
	}
	rc, err := job.open()
	if err != nil {
		return dir, meta, err
	}
	defer rc.Close()
	var src io.Reader = rc
	if wrap != nil {
		src = wrap(src)
	}
	compressed := &hashingReader{r: src}
	if !job.verified || job.digest.Hex == "" {
		compressed.h = sha256.New()
	}
	tarStream, compression, release, err := decompress(compressed)
	if err != nil {
		return dir, meta, err
	}
	defer release()
	plain := &hashingReader{r: tarStream, h: sha256.New()}
	stats, err := extractTar(ctx, plain, fsDir, s.extractOpts())
	if err != nil {
		return dir, meta, err
	}
	// The digests cover the whole stream, including tar padding and
	// anything after the end-of-archive marker.
	if _, err = io.Copy(io.Discard, plain); err != nil {
		return dir, meta, fmt.Errorf("reading layer: %w", err)
	}
	if _, err = io.Copy(io.Discard, compressed); err != nil {
		return dir, meta, fmt.Errorf("reading layer: %w", err)
	}
	if err = ctx.Err(); err != nil {
		return dir, meta, err
	}
	got := job.digest
	if compressed.h != nil {
		got = compressed.digest()
	}
	if job.digest.Hex != "" && got != job.digest {
		return dir, meta, fmt.Errorf("layer %s: content has digest %s", job.digest, got)
	}
	diffID := plain.digest()
	if job.diffID.Hex != "" && diffID != job.diffID {
		return dir, meta, fmt.Errorf("layer %s: uncompressed content has digest %s, the image config says %s", job.digest, diffID, job.diffID)
	}
	meta = layerMeta{
		DiffID:      diffID.String(),
		Digest:      got.String(),
		MediaType:   job.mediaType,
		Compression: compression,
		Size:        compressed.n,
		TarSize:     plain.n,
		Stats:       stats,
		Unpacked:    time.Now().UTC(),
	}
	data, _ := json.MarshalIndent(meta, "", "  ")
	if err = os.WriteFile(filepath.Join(dir, "layer.json"), append(data, '\n'), 0o644); err != nil {
		return dir, meta, err
	}
	if err = syncTree(dir); err != nil {
		return dir, meta, fmt.Errorf("syncing layer: %w", err)
	}
	return dir, meta, nil
}

// commitLayer renames an unpacked temporary directory into place. If the
// layer appeared meanwhile (import, which learns the diff ID only after
// unpacking), the temporary copy is dropped.
func (s *Store) commitLayer(tmp string, diffID v1.Hash) error {
	final := s.layerDir(diffID)
	err := os.Rename(tmp, final)
	if err != nil && s.haveLayer(diffID) {
		return removeAll(tmp)
	}
	if err != nil {
		return fmt.Errorf("committing layer %s: %w", diffID, err)
	}
	return atomicfile.SyncDir(filepath.Dir(final))
}

// removeLayer deletes an unpacked layer: first renamed out of layers/ so
// that a half-deleted directory is never taken for a complete one.
func (s *Store) removeLayer(diffID v1.Hash) (int64, error) {
	meta, _ := s.readLayerMeta(diffID)
	trash, err := os.MkdirTemp(s.path("tmp"), "trash-")
	if err != nil {
		return 0, err
	}
	if err := os.Rename(s.layerDir(diffID), filepath.Join(trash, "layer")); err != nil {
		_ = os.Remove(trash)
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	return meta.Stats.Bytes, removeAll(trash)
}

package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"
)

// indexVersion is the version of index.json's format.
const indexVersion = 1

// indexFile is index.json: every image the store holds, by manifest
// digest, and the tags pointing at them.
type indexFile struct {
	Version int                     `json:"version"`
	Images  map[string]*imageRecord `json:"images"`
	// Tags maps normalised references (tag or digest form) to manifest
	// digests.
	Tags map[string]string `json:"tags"`
}

// imageRecord is what the store knows about one image: enough to hand
// out its Rootfs without reading anything else.
type imageRecord struct {
	Digest       string        `json:"digest"`
	IndexDigest  string        `json:"index_digest,omitempty"`
	MediaType    string        `json:"media_type"`
	ConfigDigest string        `json:"config_digest"`
	Platform     string        `json:"platform"`
	Layers       []layerRecord `json:"layers"`
	Config       Config        `json:"config"`
	Size         int64         `json:"size"`
	UnpackedSize int64         `json:"unpacked_size"`
	Created      time.Time     `json:"created,omitzero"`
	Pulled       time.Time     `json:"pulled"`
	Source       string        `json:"source"`
	// Dangling is set when the image's last tag moved to another image;
	// Prune removes dangling images.
	Dangling bool `json:"dangling,omitempty"`
}

type layerRecord struct {
	Digest       string `json:"digest"`
	DiffID       string `json:"diff_id"`
	MediaType    string `json:"media_type"`
	Size         int64  `json:"size"`
	UnpackedSize int64  `json:"unpacked_size"`
}

func newIndex() *indexFile {
	return &indexFile{Version: indexVersion, Images: map[string]*imageRecord{}, Tags: map[string]string{}}
}

func parseIndex(data []byte) (*indexFile, error) {
	idx := newIndex()
	if err := json.Unmarshal(data, idx); err != nil {
		return nil, err
	}
	if idx.Version != indexVersion {
		return nil, fmt.Errorf("index format %d, this agentkernel understands %d", idx.Version, indexVersion)
	}
	if idx.Images == nil {
		idx.Images = map[string]*imageRecord{}
	}
	for d, rec := range idx.Images {
		// A record must be keyed by its own digest: a null record or a
		// mismatch is damage (a hand edit, a bad disk), never something
		// this code wrote. Such a record is dropped, so its image is
		// simply not cached and the next pull writes it anew.
		if rec == nil || rec.Digest != d {
			delete(idx.Images, d)
		}
	}
	if idx.Tags == nil {
		idx.Tags = map[string]string{}
	}
	return idx, nil
}

func (idx *indexFile) byDigest(d string) *imageRecord {
	if rec := idx.Images[d]; rec != nil {
		return rec
	}
	for _, rec := range idx.Images {
		if rec.IndexDigest == d {
			return rec
		}
	}
	return nil
}

// byDigestPrefix finds the one image whose manifest (or index) digest
// starts with prefix.
func (idx *indexFile) byDigestPrefix(prefix string) *imageRecord {
	if rec := idx.byDigest(prefix); rec != nil {
		return rec
	}
	var found *imageRecord
	for _, rec := range idx.Images {
		if strings.HasPrefix(rec.Digest, prefix) || (rec.IndexDigest != "" && strings.HasPrefix(rec.IndexDigest, prefix)) {
			if found != nil && found != rec {
				return nil // ambiguous
			}
			found = rec
		}
	}
	return found
}

// tagsOf lists the tags pointing at digest d.
func (idx *indexFile) tagsOf(d string) []string {
	var tags []string
	for t, td := range idx.Tags {
		if td == d {
			tags = append(tags, t)
		}
	}
	return tags
}

// setTag points tag at digest d, marking the image it leaves dangling
// when that was its last tag.
func (idx *indexFile) setTag(tag, d string) {
	old, ok := idx.Tags[tag]
	idx.Tags[tag] = d
	if !ok || old == d {
		return
	}
	if len(idx.tagsOf(old)) == 0 {
		if rec := idx.Images[old]; rec != nil {
			rec.Dangling = true
		}
	}
}

// updateIndex runs fn on a fresh copy of index.json under the index lock
// and writes the result atomically.
func (s *Store) updateIndex(ctx context.Context, fn func(*indexFile) error) error {
	unlock, err := flock(ctx, s.lockPath("index"), false)
	if err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	defer unlock()
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	if err := fn(idx); err != nil {
		return err
	}
	data, err := json.MarshalIndent(idx, "", " ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(s.indexPath(), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("image store: writing index: %w", err)
	}
	return nil
}

// readIndex reads index.json from disk (no cache).
func (s *Store) readIndex() (*indexFile, error) {
	data, err := os.ReadFile(s.indexPath())
	if errors.Is(err, fs.ErrNotExist) {
		return newIndex(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	idx, err := parseIndex(data)
	if err != nil {
		return nil, fmt.Errorf("image store %s: %w", s.indexPath(), err)
	}
	return idx, nil
}

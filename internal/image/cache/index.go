package cache

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// IndexVersion is the version of index.json's format.
const IndexVersion = 1

// Index is index.json: every image the store holds, by manifest
// digest, and the tags pointing at them.
type Index struct {
	Version int                `json:"version"`
	Images  map[string]*Record `json:"images"`
	// Tags maps normalised references (tag or digest form) to manifest
	// digests.
	Tags map[string]string `json:"tags"`
}

// Record is what the store knows about one image: enough to hand
// out its Rootfs without reading anything else.
type Record struct {
	Digest       string        `json:"digest"`
	IndexDigest  string        `json:"index_digest,omitempty"`
	MediaType    string        `json:"media_type"`
	ConfigDigest string        `json:"config_digest"`
	Platform     string        `json:"platform"`
	Layers       []LayerRecord `json:"layers"`
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

// LayerRecord is one layer of a Record, lowest first.
type LayerRecord struct {
	Digest       string `json:"digest"`
	DiffID       string `json:"diff_id"`
	MediaType    string `json:"media_type"`
	Size         int64  `json:"size"`
	UnpackedSize int64  `json:"unpacked_size"`
}

// NewIndex is an empty index.
func NewIndex() *Index {
	return &Index{Version: IndexVersion, Images: map[string]*Record{}, Tags: map[string]string{}}
}

// ParseIndex parses index.json, dropping records that are not keyed by
// their own digest.
func ParseIndex(data []byte) (*Index, error) {
	idx := NewIndex()
	if err := json.Unmarshal(data, idx); err != nil {
		return nil, err
	}
	return idx.check()
}

// check validates a decoded index and drops the records it cannot trust.
func (idx *Index) check() (*Index, error) {
	if idx.Version != IndexVersion {
		return nil, fmt.Errorf("index format %d, this agentkernel understands %d", idx.Version, IndexVersion)
	}
	if idx.Images == nil {
		idx.Images = map[string]*Record{}
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

// ByDigest finds the image whose manifest or index digest is d.
func (idx *Index) ByDigest(d string) *Record {
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

// ByDigestPrefix finds the one image whose manifest (or index) digest
// starts with prefix.
func (idx *Index) ByDigestPrefix(prefix string) *Record {
	if rec := idx.ByDigest(prefix); rec != nil {
		return rec
	}
	var found *Record
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

// TagsOf lists the tags pointing at digest d.
func (idx *Index) TagsOf(d string) []string {
	var tags []string
	for t, td := range idx.Tags {
		if td == d {
			tags = append(tags, t)
		}
	}
	return tags
}

// SetTag points tag at digest d, marking the image it leaves dangling
// when that was its last tag.
func (idx *Index) SetTag(tag, d string) {
	old, ok := idx.Tags[tag]
	idx.Tags[tag] = d
	if !ok || old == d {
		return
	}
	if len(idx.TagsOf(old)) == 0 {
		if rec := idx.Images[old]; rec != nil {
			rec.Dangling = true
		}
	}
}

package cache

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Format is the version of the on-disk layout written to store.json.
const Format = 1

// Meta is store.json: what every layer in the store was unpacked with. A
// process that would unpack differently must not share the store.
type Meta struct {
	Version    int   `json:"version"`
	IDMap      IDMap `json:"id_map"`
	Privileged bool  `json:"privileged"`
	Owner      int   `json:"owner_uid"`
}

// MetaFor is the Meta of a store this process unpacks into with m: root
// or not, and its uid.
func MetaFor(m IDMap) Meta {
	return Meta{Version: Format, IDMap: m, Privileged: os.Geteuid() == 0, Owner: os.Geteuid()}
}

// Check compares store.json's content (data) of the store at root with
// want, and says in its error what differs and what to do.
func (want Meta) Check(root string, data []byte) error {
	var have Meta
	if err := json.Unmarshal(data, &have); err != nil {
		return fmt.Errorf("image store %s: store.json: %w", root, err)
	}
	return want.compare(root, have)
}

// compare is Check once store.json is decoded.
func (want Meta) compare(root string, have Meta) error {
	if have.Version != Format {
		return fmt.Errorf("image store %s: format version %d, this agentkernel understands %d", root, have.Version, Format)
	}
	switch {
	case have.Privileged != want.Privileged:
		who := map[bool]string{true: "root", false: "a non-root user"}
		return fmt.Errorf("image store %s was unpacked by %s and cannot be used by %s: use another --data-dir",
			root, who[have.Privileged], who[want.Privileged])
	case have.IDMap == LegacyIDMap && want.IDMap == DefaultIDMap() && want.Privileged:
		return fmt.Errorf("image store %s: %w", root, ErrLegacyStore)
	case have.IDMap != want.IDMap:
		return fmt.Errorf("image store %s was unpacked with id map %s, this process uses %s: use another --data-dir",
			root, have.IDMap, want.IDMap)
	case !have.Privileged && have.Owner != want.Owner:
		return fmt.Errorf("image store %s belongs to uid %d, this process runs as uid %d: use another --data-dir",
			root, have.Owner, want.Owner)
	}
	return nil
}

// Cache reads the index of the image store at one root directory
// (<data-dir>/images). It is safe for concurrent use.
type Cache struct {
	root      string
	indexFile string
	snapMu    sync.Mutex
	snap      atomic.Pointer[Snapshot]
	// lean: Lookup's cache, whose records carry only what a run needs
	// (parseIndexLean).
	lean bool
}

// New reads the store at root (<data-dir>/images, absolute).
func New(root string) *Cache {
	return &Cache{root: root, indexFile: filepath.Join(root, "index.json")}
}

// IndexPath is the path of index.json.
func (c *Cache) IndexPath() string { return c.indexFile }

// LayerDir is the directory of the unpacked layer with diff ID
// "algorithm:hex" (its files are in LayerDir/fs).
func (c *Cache) LayerDir(algorithm, hex string) string {
	return filepath.Join(c.root, "layers", algorithm, hex)
}

// Close releases the file the cache keeps open for its snapshot.
func (c *Cache) Close() error {
	if old := c.snap.Swap(nil); old != nil && old.f != nil {
		return old.f.Close()
	}
	return nil
}

// Snapshot is a parsed index.json. Its file stays open so that the inode
// cannot be reused: index.json is only ever replaced by rename, so while
// the path still names the same inode the snapshot is current.
type Snapshot struct {
	f        *os.File
	dev, ino uint64
	Index    *Index
	// LayerPaths maps a manifest digest to its layers' fs directories,
	// lowest first.
	LayerPaths map[string][]string
}

// Find resolves ref (a tag or digest reference, or a bare "sha256:…"
// digest or prefix) to the tag key it was found under and its record.
// normalize turns a reference into its index key.
func (sn *Snapshot) Find(ref string, normalize func(string) (string, error)) (string, *Record) {
	idx := sn.Index
	if IsDigestRef(ref) {
		return "", idx.ByDigestPrefix(ref)
	}
	r, err := normalize(ref)
	if err != nil {
		return "", nil
	}
	if d, ok := idx.Tags[r]; ok {
		if rec := idx.Images[d]; rec != nil {
			return r, rec
		}
	}
	if _, dg, ok := strings.Cut(r, "@"); ok {
		if rec := idx.ByDigest(dg); rec != nil {
			return r, rec
		}
	}
	return "", nil
}

// Resolve is Find plus a check that every layer directory of the image is
// present: ok is false on a miss. key is the reference the image was
// found under, its digest when found by digest.
func (sn *Snapshot) Resolve(ref string, normalize func(string) (string, error)) (key string, rec *Record, paths []string, ok bool) {
	key, rec = sn.Find(ref, normalize)
	if rec == nil {
		return "", nil, nil, false
	}
	paths = sn.LayerPaths[rec.Digest]
	var st syscall.Stat_t
	for _, p := range paths {
		if syscall.Lstat(p, &st) != nil {
			return "", nil, nil, false
		}
	}
	if key == "" {
		key = rec.Digest
	}
	return key, rec, paths, true
}

// Current returns the snapshot of index.json, re-reading it only when the
// file was replaced. A store without an index has an empty one.
func (c *Cache) Current() (*Snapshot, error) {
	var st syscall.Stat_t
	err := syscall.Stat(c.indexFile, &st)
	if errors.Is(err, syscall.ENOENT) {
		return &Snapshot{Index: NewIndex(), LayerPaths: map[string][]string{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image store: %s: %w", c.indexFile, err)
	}
	if sn := c.snap.Load(); sn != nil && sn.dev == uint64(st.Dev) && sn.ino == uint64(st.Ino) {
		return sn, nil
	}
	c.snapMu.Lock()
	defer c.snapMu.Unlock()
	f, err := os.Open(c.indexFile)
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	sn, err := c.load(f)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if old := c.snap.Swap(sn); old != nil && old.f != nil {
		_ = old.f.Close()
	}
	return sn, nil
}

func (c *Cache) load(f *os.File) (*Snapshot, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	parse := ParseIndex
	if c.lean {
		parse = parseIndexLean
	}
	idx, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("image store %s: %w", c.indexFile, err)
	}
	sn := &Snapshot{f: f, dev: uint64(st.Dev), ino: uint64(st.Ino), Index: idx, LayerPaths: make(map[string][]string, len(idx.Images))}
	for d, rec := range idx.Images {
		paths := make([]string, 0, len(rec.Layers))
		for i, l := range rec.Layers {
			algorithm, hex, err := ParseDigest(l.DiffID)
			if err != nil {
				return nil, fmt.Errorf("image store: image %s: %w", d, err)
			}
			// A layer that occurs again higher up adds nothing here (its
			// higher copy hides every name it has), and overlayfs rejects
			// a lowerdir listed twice: keep only the topmost occurrence.
			if slices.ContainsFunc(rec.Layers[i+1:], func(o LayerRecord) bool { return o.DiffID == l.DiffID }) {
				continue
			}
			paths = append(paths, filepath.Join(c.LayerDir(algorithm, hex), "fs"))
		}
		sn.LayerPaths[d] = paths
	}
	return sn, nil
}

// ParseDigest splits a "sha256:<64 hex digits>" digest, the only kind the
// store writes.
func ParseDigest(d string) (algorithm, hex string, err error) {
	algorithm, hex, ok := strings.Cut(d, ":")
	if !ok || algorithm != "sha256" || len(hex) != 64 || !isLowerHex(hex) {
		return "", "", fmt.Errorf("digest %q: want sha256:<64 hex digits>", d)
	}
	return algorithm, hex, nil
}

// RootfsOf is the Rootfs handed out for rec found under ref with the
// layer directories paths, in a store unpacked with m (by root when
// privileged).
func RootfsOf(ref string, rec *Record, paths []string, privileged bool, m IDMap) Rootfs {
	return Rootfs{
		Ref:       ref,
		Digest:    rec.Digest,
		Layers:    slices.Clone(paths),
		UserXattr: !privileged,
		IDMap:     m,
		Config: Config{
			Env:        slices.Clone(rec.Config.Env),
			Entrypoint: slices.Clone(rec.Config.Entrypoint),
			Cmd:        slices.Clone(rec.Config.Cmd),
			WorkingDir: rec.Config.WorkingDir,
			User:       rec.Config.User,
		},
	}
}

// Lookup finds ref among the images cached under dataDir for a process
// that would unpack with want, reading only store.json, index.json and
// the layer directories. ok is false when the image is not cached, when
// ref is not in a form Normalize accepts, or when there is no store yet;
// an error means the store exists but cannot serve this process (another
// id map or owner, damage). Either way the full image store decides what
// to do (pull, or a clear error).
func Lookup(dataDir, ref string, want Meta) (Rootfs, bool, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return Rootfs{}, false, err
	}
	root := filepath.Join(abs, "images")
	data, err := os.ReadFile(filepath.Join(root, "store.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return Rootfs{}, false, nil
	}
	if err != nil {
		return Rootfs{}, false, fmt.Errorf("image store: %w", err)
	}
	have, err := decodeMetaLean(data)
	if err != nil {
		return Rootfs{}, false, fmt.Errorf("image store %s: store.json: %w", root, err)
	}
	if err := want.compare(root, have); err != nil {
		if errors.Is(err, ErrLegacyStore) {
			return Rootfs{}, false, nil // the full store converts it
		}
		return Rootfs{}, false, err
	}
	c := New(root)
	c.lean = true
	defer c.Close()
	sn, err := c.Current()
	if err != nil {
		return Rootfs{}, false, err
	}
	key, rec, paths, ok := sn.Resolve(ref, func(r string) (string, error) {
		if n, ok := Normalize(r); ok {
			return n, nil
		}
		return "", errNotNormal
	})
	if !ok {
		return Rootfs{}, false, nil
	}
	return RootfsOf(key, rec, paths, want.Privileged, want.IDMap), true, nil
}

var errNotNormal = errors.New("reference needs the full parser")

package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentkernel/agentkernel/internal/atomicfile"
	"github.com/agentkernel/agentkernel/internal/image/cache"
)

// defaultDownloads is how many layers are fetched and unpacked at once.
const defaultDownloads = 3

// Options configure a Store. The zero value is usable: host platform,
// no insecure registries, no progress output, Docker's keychain, no id
// shift.
type Options struct {
	// InsecureRegistries may be spoken to over plain HTTP or TLS without
	// verification ("host" or "host:port"). Loopback registries
	// (localhost, 127.0.0.0/8, ::1) always may.
	InsecureRegistries []string
	// Platform selects the image of a multi-arch index, as
	// "os/arch[/variant]" (e.g. "linux/arm64"). Empty means the host's.
	// When set, cached images of another platform count as missing.
	Platform string
	// Progress receives pull progress: one bar per layer when it is a
	// terminal, a few plain lines otherwise. Nil: nothing.
	Progress io.Writer
	// Quiet silences Progress (as --quiet does).
	Quiet bool
	// Keychain finds registry credentials; nil means
	// authn.DefaultKeychain (~/.docker/config.json, $DOCKER_CONFIG,
	// credential helpers).
	Keychain authn.Keychain
	// IDMap is the ownership shift for unpacked layers (see IDMap and
	// DefaultIDMap). A store keeps the map it was first used with.
	IDMap IDMap
	// Transport overrides the HTTP transport used to talk to registries.
	Transport http.RoundTripper
	// Downloads is how many layers are fetched at once (default 3).
	Downloads int
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
}

// Store is the image cache under one data directory. It is safe for
// concurrent use by goroutines and by processes sharing the directory.
type Store struct {
	root       string
	opts       Options
	platform   v1.Platform
	privileged bool
	keychain   authn.Keychain
	log        *slog.Logger

	cache *cache.Cache // index.json's snapshot and layer paths

	// refKeys caches NormalizeRef for lookups (bounded; reset when full).
	refMu   sync.RWMutex
	refKeys map[string]string

	transportOnce sync.Once
	transport     http.RoundTripper
	insecureTr    http.RoundTripper
}

// Open opens (creating if needed) the image store under
// <dataDir>/images. It refuses a store whose layers were unpacked with
// another IDMap or by another kind of user (root versus rootless), since
// their files' owners would be wrong for this caller's sandboxes.
func Open(dataDir string, opts Options) (*Store, error) {
	if dataDir == "" {
		return nil, errors.New("image store: empty data directory")
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	if err := opts.IDMap.Validate(); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	s := &Store{
		root:       filepath.Join(abs, "images"),
		cache:      cache.New(filepath.Join(abs, "images")),
		refKeys:    map[string]string{},
		opts:       opts,
		privileged: os.Geteuid() == 0,
		keychain:   opts.Keychain,
		log:        opts.Logger,
	}
	if !opts.IDMap.IsZero() && !s.privileged {
		return nil, fmt.Errorf("image store: id map %s needs root (running as uid %d)", opts.IDMap, os.Geteuid())
	}
	if s.keychain == nil {
		s.keychain = authn.DefaultKeychain
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.opts.Downloads <= 0 {
		s.opts.Downloads = defaultDownloads
	}
	s.platform = hostPlatform()
	if opts.Platform != "" {
		p, err := v1.ParsePlatform(opts.Platform)
		if err != nil {
			return nil, fmt.Errorf("image store: platform %q: %w", opts.Platform, err)
		}
		s.platform = *p
	}
	if err := s.checkMeta(); err != nil {
		return nil, err
	}
	return s, nil
}

// Close releases the file the store keeps open for its index cache.
func (s *Store) Close() error { return s.cache.Close() }

// Dir is the store's root directory (<dataDir>/images).
func (s *Store) Dir() string { return s.root }

func hostPlatform() v1.Platform {
	p := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	if runtime.GOARCH == "arm" {
		p.Variant = "v7"
	}
	return p
}

func (s *Store) path(elem ...string) string {
	return filepath.Join(append([]string{s.root}, elem...)...)
}

func (s *Store) indexPath() string { return s.cache.IndexPath() }
func (s *Store) lockPath(name string) string {
	return s.path("locks", name+".lock")
}
func (s *Store) blobPath(h v1.Hash) string {
	return s.path("blobs", h.Algorithm, h.Hex)
}
func (s *Store) layerDir(diffID v1.Hash) string {
	return s.cache.LayerDir(diffID.Algorithm, diffID.Hex)
}
func (s *Store) layerFS(diffID v1.Hash) string {
	return filepath.Join(s.layerDir(diffID), "fs")
}

func (s *Store) wantMeta() cache.Meta { return cache.MetaFor(s.opts.IDMap) }

// checkMeta reads store.json (one small read on the common path) and
// creates the layout when it does not exist yet.
func (s *Store) checkMeta() error {
	want := s.wantMeta()
	data, err := os.ReadFile(s.path("store.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return s.create(want)
	}
	if err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	err = want.Check(s.root, data)
	if errors.Is(err, cache.ErrLegacyStore) {
		return s.convertLegacy(want)
	}
	return err
}

func (s *Store) create(want cache.Meta) error {
	if err := os.MkdirAll(s.root, 0o700); err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	for _, d := range []string{"blobs/sha256", "layers/sha256", "locks", "tmp"} {
		if err := os.MkdirAll(s.path(d), 0o700); err != nil {
			return fmt.Errorf("image store: %w", err)
		}
	}
	unlock, err := flock(context.Background(), s.lockPath("index"), false)
	if err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	defer unlock()
	// Another process may have created it while we waited.
	if data, err := os.ReadFile(s.path("store.json")); err == nil {
		return want.Check(s.root, data)
	}
	data, _ := json.MarshalIndent(want, "", "  ")
	if err := atomicfile.WriteFile(s.path("store.json"), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	return nil
}

// Ensure returns the root filesystem of ref, pulling it as policy says.
// The host image ("host") resolves without I/O. A cache hit does not
// contact the registry (with PullMissing or PullNever) and costs a stat of
// the index and of each layer directory. Errors wrap ErrNotFound (not
// cached with PullNever, or unknown to the registry) and ErrUnreachable
// (not cached and the registry cannot be reached).
func (s *Store) Ensure(ctx context.Context, ref string, policy PullPolicy) (Rootfs, error) {
	if IsHost(ref) {
		return HostRootfs(), nil
	}
	switch policy {
	case "", PullMissing, PullNever:
		rfs, ok, err := s.lookup(ref)
		if err != nil {
			return Rootfs{}, err
		}
		if ok {
			return rfs, nil
		}
		if policy == PullNever {
			return Rootfs{}, fmt.Errorf("%w: %s is not cached (pull policy never)", ErrNotFound, ref)
		}
		if isDigestRef(ref) {
			return Rootfs{}, fmt.Errorf("%w: no cached image with digest %s", ErrNotFound, ref)
		}
	case PullAlways:
	default:
		return Rootfs{}, fmt.Errorf("pull policy %q: use missing, always or never", policy)
	}
	return s.Pull(ctx, ref)
}

// lookup resolves ref in the cache and checks its layers are present.
func (s *Store) lookup(ref string) (Rootfs, bool, error) {
	snap, err := s.current()
	if err != nil {
		return Rootfs{}, false, err
	}
	key, rec, paths, ok := snap.Resolve(ref, s.refKey)
	if !ok || s.opts.Platform != "" && !platformMatches(rec.Platform, s.platform) {
		return Rootfs{}, false, nil
	}
	return s.rootfsOf(key, rec, paths), true, nil
}

func (s *Store) rootfsOf(ref string, rec *imageRecord, paths []string) Rootfs {
	return cache.RootfsOf(ref, rec, paths, s.privileged, s.opts.IDMap)
}

func platformMatches(have string, want v1.Platform) bool {
	p, err := v1.ParsePlatform(have)
	if err != nil {
		return false
	}
	return p.Satisfies(want)
}

// refKey is NormalizeRef for lookups, cached.
func (s *Store) refKey(ref string) (string, error) {
	s.refMu.RLock()
	key, ok := s.refKeys[ref]
	s.refMu.RUnlock()
	if ok {
		return key, nil
	}
	key, err := normalize(ref)
	if err != nil {
		return "", err
	}
	s.refMu.Lock()
	if len(s.refKeys) >= 256 {
		clear(s.refKeys)
	}
	s.refKeys[ref] = key
	s.refMu.Unlock()
	return key, nil
}

// current returns the snapshot of index.json, re-reading it only when
// the file was replaced.
func (s *Store) current() (*cache.Snapshot, error) { return s.cache.Current() }

package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentkernel/agentkernel/internal/atomicfile"
	"github.com/agentkernel/agentkernel/internal/idshift"
	"github.com/agentkernel/agentkernel/internal/image/cache"
)

// convertLegacy turns a root store unpacked with cache.LegacyIDMap (every
// image id shifted by 100000 on disk) into one that keeps the image's own
// ids, which sandboxes now see through idmapped mounts into blocks of
// host ids of their own: once, with gc.lock held exclusively (no pull,
// load or prune runs meanwhile), then store.json says so. Interrupted, it
// starts again where it stopped: ids already converted are below the
// legacy range and left alone.
func (s *Store) convertLegacy(want cache.Meta) error {
	unlock, err := flock(context.Background(), s.lockPath("gc"), false)
	if err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	defer unlock()
	// Another process may have converted it while we waited.
	data, err := os.ReadFile(s.path("store.json"))
	if err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	if err := want.Check(s.root, data); !errors.Is(err, cache.ErrLegacyStore) {
		return err
	}
	s.log.Info("converting the image store to the image's own ids (once)", "store", s.root)
	if s.opts.Progress != nil && !s.opts.Quiet {
		fmt.Fprintf(s.opts.Progress, "Converting the image store %s to the image's own file owners (once)...\n", s.root)
	}
	layers := s.path("layers", "sha256")
	ents, err := os.ReadDir(layers)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("image store: %w", err)
	}
	for _, e := range ents {
		// Image ids 0…65535 were stored at LegacyIDMap.UID…; a file
		// capability is rewritten for the image's own root.
		m := cache.LegacyIDMap
		if err := idshift.Tree(filepath.Join(layers, e.Name(), "fs"), m.UID, 0, m.Size, func(v []byte) ([]byte, bool) { return shiftCapability(v, 0) }); err != nil {
			return fmt.Errorf("image store: converting layer %s: %w", e.Name(), err)
		}
	}
	// Half-unpacked layers of the old kind are not worth converting.
	if tmp, err := os.ReadDir(s.path("tmp")); err == nil {
		for _, e := range tmp {
			_ = os.RemoveAll(s.path("tmp", e.Name()))
		}
	}
	out, _ := json.MarshalIndent(want, "", "  ")
	if err := atomicfile.WriteFile(s.path("store.json"), append(out, '\n'), 0o644); err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	return nil
}

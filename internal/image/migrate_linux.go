package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

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
		if err := unshiftTree(filepath.Join(layers, e.Name(), "fs"), cache.LegacyIDMap); err != nil {
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
	if err := writeFileAtomic(s.path("store.json"), append(out, '\n'), 0o644); err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	return nil
}

// unshiftTree gives every file under root that is owned by an id of m's
// range the image id it stands for (host id - m.UID), keeping its set-id
// bits and its file capability (which chown would clear: it is written
// back as one whose root is the image's uid 0).
func unshiftTree(root string, m cache.IDMap) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == root {
				return nil
			}
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		uid, gid := unshift(st.Uid, m.UID, m.Size), unshift(st.Gid, m.GID, m.Size)
		if uid == st.Uid && gid == st.Gid {
			return nil
		}
		var capv []byte
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			buf := make([]byte, 64)
			if n, err := unix.Lgetxattr(p, "security.capability", buf); err == nil && n > 0 {
				capv = buf[:n]
			}
		}
		if err := unix.Lchown(p, int(uid), int(gid)); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil
		}
		if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			if err := unix.Chmod(p, st.Mode&0o7777); err != nil {
				return err
			}
		}
		if capv != nil {
			if v, ok := shiftCapability(capv, 0); ok {
				if err := unix.Lsetxattr(p, "security.capability", v, 0); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// unshift maps a host id of the range [base, base+size) back to its
// image id; other ids are left as they are.
func unshift(id, base, size uint32) uint32 {
	if id >= base && uint64(id) < uint64(base)+uint64(size) {
		return id - base
	}
	return id
}

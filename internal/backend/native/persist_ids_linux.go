package native

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentkernel/agentkernel/internal/atomicfile"
	"github.com/agentkernel/agentkernel/internal/backend/native/idrange"
	"github.com/agentkernel/agentkernel/internal/idshift"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// A persistent sandbox keeps one block of host ids (idrange) from its
// first start to its removal: its writable layer on disk is owned by
// them. The block's first id is recorded in <dir>/idrange and reserved in
// the machine-wide allocator under the sandbox's data directory, name and
// id; Backend.ReleaseIDs frees it, and GCIDs (Backend.ReleaseOrphanedIDs
// for the backend's data directory) frees the blocks of sandboxes that no
// longer exist.

// idrangeFile names the recorded block in a persistent sandbox's
// directory.
const idrangeFile = "idrange"

// legacyIDBase is where sandboxes created before blocks existed had their
// ids (their writable layers are re-owned on their next start).
const legacyIDBase = 100000

func reservation(dataDir string, spec *sandbox.Spec) idrange.Reservation {
	id := spec.ID
	if id == "" {
		id = spec.Name
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	return idrange.Reservation{DataDir: abs, Name: spec.Name, UUID: id}
}

// persistentIDs returns the persistent sandbox's block (whose files live
// in dir), reserving one on its first start. A block recorded but lost
// (its reservation removed by hand, the allocator's directory wiped) is
// claimed again when free; when it is not, a new block is reserved and
// the writable layer re-owned into it, as for a sandbox made before
// blocks existed.
func (b *Backend) persistentIDs(spec *sandbox.Spec, dir string) (uint32, error) {
	return reserveIDs(b.opts.DataDir, spec, dir, func(old, base uint32) error {
		// The root's writable layer and those of its copy-on-write
		// volumes (cow<i>/, mountCow).
		layers, _ := filepath.Glob(filepath.Join(dir, "cow[0-9]*"))
		for _, l := range append([]string{dir}, layers...) {
			if err := idshift.Tree(filepath.Join(l, "upper"), old, base, idrange.Size, nil); err != nil {
				return fmt.Errorf("moving the sandbox's files to its host uid range: %w", err)
			}
			// The work directory holds nothing between mounts.
			if ents, err := os.ReadDir(filepath.Join(l, "work")); err == nil {
				for _, e := range ents {
					_ = os.RemoveAll(filepath.Join(l, "work", e.Name()))
				}
			}
		}
		return nil
	})
}

// PersistentIDs is the block of host ids of the persistent sandbox spec
// of data directory dataDir whose files live in dir, for the backends
// whose sandboxes keep no files of their own in it (gvisor's and the
// engines' writable host directories, idmapped into it): reserved at
// its first start, recorded in dir as native's is, the same at every
// start until the sandbox is removed (ReleaseIDs, GCIDs free it). A
// recorded block that was lost and taken meanwhile is replaced by a new
// one (what was written in the old one's ids shows as nobody then).
func PersistentIDs(dataDir string, spec *sandbox.Spec, dir string) (uint32, error) {
	return reserveIDs(dataDir, spec, dir, nil)
}

// reserveIDs returns the block recorded in dir when it is still (or
// again) spec's reservation, else reserves a new one, has reown move
// what dir keeps from the old block's ids (legacyIDBase when none was
// recorded) into it, and records it.
func reserveIDs(dataDir string, spec *sandbox.Spec, dir string, reown func(old, base uint32) error) (uint32, error) {
	alloc := idrange.Default()
	r := reservation(dataDir, spec)
	old := uint32(legacyIDBase)
	if data, err := os.ReadFile(filepath.Join(dir, idrangeFile)); err == nil {
		n, perr := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 32)
		if perr != nil {
			return 0, fmt.Errorf("%s: %w", filepath.Join(dir, idrangeFile), perr)
		}
		base := uint32(n)
		if held, err := alloc.Held(base, r); err != nil {
			return 0, err
		} else if held {
			return base, nil
		}
		if ok, err := alloc.Claim(base, r); err != nil {
			return 0, err
		} else if ok {
			return base, nil
		}
		old = base
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	base, err := alloc.Reserve(r)
	if err != nil {
		return 0, fmt.Errorf("reserving the sandbox's host uid range: %w", err)
	}
	if reown != nil {
		if err := reown(old, base); err != nil {
			_ = alloc.Free(base, r)
			return 0, err
		}
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, idrangeFile), []byte(strconv.FormatUint(uint64(base), 10)+"\n"), 0o600); err != nil {
		_ = alloc.Free(base, r)
		return 0, err
	}
	return base, nil
}

// ReleaseIDs frees the block of the persistent sandbox of the backend's
// data directory whose files live in dir (when it is being removed).
func (b *Backend) ReleaseIDs(spec *sandbox.Spec, dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, idrangeFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 32)
	if err != nil {
		return nil
	}
	return idrange.Default().Free(uint32(n), reservation(b.opts.DataDir, spec))
}

// ReleaseOrphanedIDs is GCIDs for the backend's data directory.
func (b *Backend) ReleaseOrphanedIDs(known map[string]string, dryRun bool) ([]string, error) {
	return GCIDs(b.opts.DataDir, known, dryRun)
}

// GCIDs frees the blocks reserved for sandboxes of data directory dataDir
// that no longer exist (known maps each existing sandbox's name to its
// id), and those of any data directory that is gone. With dataDir "" only
// the latter. It returns what it freed.
func GCIDs(dataDir string, known map[string]string, dryRun bool) ([]string, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	alloc := idrange.Default()
	res, err := alloc.Reservations()
	if err != nil {
		return nil, err
	}
	mine := ""
	if dataDir != "" {
		mine = reservation(dataDir, &sandbox.Spec{}).DataDir
	}
	var freed []string
	var errs []error
	for base, r := range res {
		if mine == "" || r.DataDir != mine {
			// A data directory that is gone (deleted by hand, a test's)
			// has no sandbox left to need its blocks.
			if _, err := os.Stat(r.DataDir); !errors.Is(err, fs.ErrNotExist) || r.DataDir == "" {
				continue
			}
		} else if id, ok := known[r.Name]; ok && (id == r.UUID || r.UUID == r.Name) {
			continue
		}
		freed = append(freed, fmt.Sprintf("host uid range %d-%d (sandbox %s)", base, base+idrange.Size-1, r.Name))
		if !dryRun {
			if err := alloc.Free(base, r); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return freed, errors.Join(errs...)
}

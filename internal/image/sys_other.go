//go:build !linux

package image

import (
	"fmt"

	"github.com/agentkernel/agentkernel/internal/atomicfile"
	"github.com/agentkernel/agentkernel/internal/image/cache"
)

// syncTree is a no-op where layers cannot be unpacked anyway.
func syncTree(dir string) error { return atomicfile.SyncDir(dir) }

// convertLegacy cannot run where layers cannot be unpacked.
func (s *Store) convertLegacy(want cache.Meta) error {
	return fmt.Errorf("image store %s was unpacked with the legacy id map: convert it on Linux", s.root)
}

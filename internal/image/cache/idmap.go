package cache

import (
	"errors"
	"fmt"
	"os"
)

// overflowID is the id that ids outside an IDMap are clamped to (the
// kernel's default overflowuid/overflowgid, "nobody").
const overflowID = 65534

// IDMap is the ownership shift applied when layers are unpacked as root:
// a file owned by uid u in the image is stored as uid UID+u (likewise
// GID+g), so that a user namespace mapping 0..Size-1 to UID..UID+Size-1
// sees the image's own owners. Ids at or above Size are stored as the
// overflow id 65534+UID. The zero IDMap means no shift: as root the tar's
// ids are kept verbatim; rootless nothing is chowned at all.
type IDMap struct {
	// UID and GID are the host ids of the image's uid 0 and gid 0.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Size is how many ids are mapped.
	Size uint32 `json:"size"`
}

// DefaultIDMap is the map the native backend uses. As root, layers keep
// the image's own ids 0..65535 (no shift; ids above are stored as the
// overflow id 65534): each sandbox sees them through idmapped mounts
// shifted into a block of host ids of its own. Rootless it is the zero
// map (no chown: every file is the caller's).
func DefaultIDMap() IDMap {
	if os.Geteuid() == 0 {
		return IDMap{UID: 0, GID: 0, Size: 65536}
	}
	return IDMap{}
}

// LegacyIDMap is the map root stores were unpacked with before layers
// kept the image's own ids: image ids 0..65535 on host ids
// 100000..165535. Such a store is converted once (image.Open).
var LegacyIDMap = IDMap{UID: 100000, GID: 100000, Size: 65536}

// ErrLegacyStore is returned by Lookup for a root store unpacked with
// LegacyIDMap: the full image store converts it.
var ErrLegacyStore = errors.New("image store unpacked with the legacy id map")

// IsZero reports whether m is the zero map (no shift).
func (m IDMap) IsZero() bool { return m == IDMap{} }

// String renders m as "uid:gid:size".
func (m IDMap) String() string {
	if m.IsZero() {
		return "none"
	}
	return fmt.Sprintf("%d:%d:%d", m.UID, m.GID, m.Size)
}

// Validate checks that m's ranges fit in 32 bits and are not empty.
func (m IDMap) Validate() error {
	if m.IsZero() {
		return nil
	}
	if m.Size == 0 {
		return fmt.Errorf("id map %s: size must be positive", m)
	}
	if uint64(m.UID)+uint64(m.Size) > 1<<32-1 || uint64(m.GID)+uint64(m.Size) > 1<<32-1 {
		return fmt.Errorf("id map %s: range overflows 32 bits", m)
	}
	return nil
}

// HostUID returns the host uid that image uid id is stored as.
func (m IDMap) HostUID(id int) int { return m.shift(id, m.UID) }

// HostGID returns the host gid that image gid id is stored as.
func (m IDMap) HostGID(id int) int { return m.shift(id, m.GID) }

func (m IDMap) shift(id int, base uint32) int {
	if id < 0 {
		id = 0
	}
	if m.Size == 0 {
		return id
	}
	if uint64(id) >= uint64(m.Size) {
		id = overflowID
	}
	return int(base) + id
}

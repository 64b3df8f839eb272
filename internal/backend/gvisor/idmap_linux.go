package gvisor

import (
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/agentkernel/agentkernel/internal/backend/native/idrange"
	"github.com/agentkernel/agentkernel/internal/hostidmap"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// ownedIDs is the block of host ids a run's writable binds are idmapped
// into, and whom the sandbox's root stands for there.
type ownedIDs struct {
	lease *idrange.Lease
	owner hostidmap.Owner
	// reserved is a persistent sandbox's block (0: a run's, leased at
	// its first writable bind).
	reserved uint32
	set      bool
}

func (o *ownedIDs) release() {
	o.lease.Release()
	o.lease = nil
	o.set = false
}

// ownedBind is where a writable bind of src (the spec's mount i) is
// shown to runsc: an idmapped clone of it in the run's directory, on the
// run's own mount namespace, in which host root (the gofer, and the
// Sentry with direct file access, write as host root) stands for the
// invoking user and id n for n of a block of host ids leased for the
// run. So the sandbox's files and chowns land on the invoking user or
// that block, as native's do (package hostidmap), and the clone is
// nosuid and nodev.
func (r *run) ownedBind(i int, src string) (string, error) {
	if !r.ids.set && r.ids.reserved != 0 {
		o, err := hostidmap.Reserved(r.ids.reserved)
		if err != nil {
			return "", err
		}
		r.ids.owner, r.ids.set = o, true
	}
	if !r.ids.set {
		o, l, err := hostidmap.Lease()
		if err != nil {
			return "", err
		}
		r.ids = ownedIDs{lease: l, owner: o, set: true}
	}
	dst := filepath.Join(r.dir, "owned"+strconv.Itoa(i))
	if err := hostidmap.MountPoint(src, dst); err != nil {
		return "", err
	}
	if err := hostidmap.Mount(src, dst, r.ids.owner); err != nil {
		return "", fmt.Errorf("showing %s to the sandbox as the invoking user's: %w", src, err)
	}
	return dst, nil
}

// writableBind says whether spec binds a host path writable (idmapped,
// ownedBind).
func writableBind(spec *sandbox.Spec) bool {
	for _, m := range spec.Mounts {
		if m.Kind == sandbox.MountBind && !m.ReadOnly {
			return true
		}
	}
	return false
}

// hostWritable says whether the sandbox writes files onto the host's
// disk through the gofer: a writable bind (the project, as the invoking
// user's) or a copy-on-write volume (its layer in the run's directory).
// Such a sandbox runs under native's set-id guard (native.GuardSetid),
// loaded by the Sentry (runsc --oci-seccomp): no set-id file or file
// capability is left there.
func hostWritable(spec *sandbox.Spec) bool {
	for _, m := range spec.Mounts {
		if !m.ReadOnly && (m.Kind == sandbox.MountBind || m.Kind == sandbox.MountCopyOnWrite) {
			return true
		}
	}
	return false
}

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/internal/audit"
)

// Snapshots of persistent sandboxes: a snapshot is the sandbox's writable
// layer turned into read-only layers, kept with the spec they belong to.
// Restoring one creates a new, stopped persistent sandbox that stacks the
// source's layers and the snapshot's under a fresh writable layer of its
// own: nothing is copied, whatever the size. The mechanism (package
// supervisor) implements Snapshotter; the Manager adds names, defaults
// and the audit log.

// Errors of snapshots, mapped like the sandboxes' (HTTP 404 / 409, exit
// 125).
var (
	// ErrSnapshotNotFound means no snapshot has that name.
	ErrSnapshotNotFound = errors.New("snapshot not found")
	// ErrSnapshotExists means the snapshot name is taken.
	ErrSnapshotExists = errors.New("snapshot already exists")
)

// Snapshot is a snapshot as the faces show it (upstream's metadata
// fields, without the image tag: no image is made).
type Snapshot struct {
	Name    string `json:"name"`
	Sandbox string `json:"sandbox"`
	Backend string `json:"backend"`
	// BaseImage is the image the source sandbox was created from.
	BaseImage string `json:"base_image"`
	VCPUs     int64  `json:"vcpus,omitempty"`
	MemoryMB  int64  `json:"memory_mb,omitempty"`
	// Layers is how many read-only layers a restored sandbox stacks
	// (the image's and every snapshot's it descends from).
	Layers    int       `json:"layers"`
	CreatedAt time.Time `json:"created_at"`
	// Memory: the snapshot also holds the running sandbox's memory (its
	// processes), which the first start of a sandbox restored from it
	// resumes (SnapshotOptions.Memory; gvisor only).
	Memory bool `json:"memory,omitempty"`
}

// SnapshotOptions are a take's options.
type SnapshotOptions struct {
	// Memory also takes the memory of the running sandbox: its detached
	// commands resume, with their memory, at the first start of a
	// sandbox restored from the snapshot. The backend must be a
	// Checkpointer (gvisor), the sandbox running.
	Memory bool
}

// MemorySnapshotter is a Snapshotter that takes snapshots with options
// (package supervisor's Manager).
type MemorySnapshotter interface {
	TakeSnapshotWith(ctx context.Context, sandbox, name string, opts SnapshotOptions) (*Snapshot, error)
}

// MemoryDir is, in a persistent sandbox's directory, the memory image a
// restore of a memory snapshot leaves for its first start (which
// consumes it): the Checkpointer's files and, in detached/, the records
// of the detached commands it holds.
const MemoryDir = "memory"

// Checkpointer is what a backend offers to take the memory of a
// running sandbox, which its Freezer holds still.
type Checkpointer interface {
	// Checkpoint writes the memory of the sandbox spec describes (its
	// directory dir) into the directory to (made, only root may enter
	// it) and returns the ids of the detached commands it holds; an
	// error wrapping ErrUnsupported for a sandbox it cannot take.
	Checkpoint(spec *Spec, dir, to string) (detached []string, err error)
}

// Snapshotter takes, lists, restores and deletes snapshots. The Manager
// finds it on its Store (package supervisor's Manager is both).
type Snapshotter interface {
	// TakeSnapshot turns the writable layer of sandbox into the
	// snapshot name (ErrSandboxNotFound, ErrSnapshotExists). A running
	// sandbox is frozen while its layer is copied; a stopped one's layer
	// becomes the snapshot's as it is, and the sandbox stacks it.
	TakeSnapshot(ctx context.Context, sandbox, name string) (*Snapshot, error)
	// ListSnapshots returns every snapshot, oldest first.
	ListSnapshots(ctx context.Context) ([]*Snapshot, error)
	// GetSnapshot returns one (ErrSnapshotNotFound).
	GetSnapshot(ctx context.Context, name string) (*Snapshot, error)
	// RestoreSnapshot creates the stopped sandbox as from the snapshot
	// name (ErrSnapshotNotFound, ErrSandboxExists) and returns it.
	RestoreSnapshot(ctx context.Context, name, as string) (*Info, error)
	// DeleteSnapshot removes the snapshot; layers a sandbox still
	// stacks stay until no sandbox does (ErrSnapshotNotFound).
	DeleteSnapshot(ctx context.Context, name string) error
}

// SnapshotHolder is what a Snapshotter offers for exports: the
// snapshot and the spec a restore of it uses, its Rootfs.Layers the
// whole stack (ErrSnapshotNotFound), held until release: no take,
// restore or delete of a snapshot runs meanwhile, so none of its layers
// goes while an export reads them.
type SnapshotHolder interface {
	HoldSnapshot(ctx context.Context, name string) (snap *Snapshot, spec *Spec, release func(), err error)
}

// Freezer is what a backend offers to hold a running sandbox still
// while its writable layer is copied (native: the cgroup freezer;
// gvisor: runsc pause). dir is the persistent sandbox's directory,
// where a backend may keep its runtime state (gvisor's runsc state).
type Freezer interface {
	// Freeze freezes every process of the sandbox whose backend id is
	// id; thaw lets them run again.
	Freeze(id, dir string) (thaw func() error, err error)
	// Thaw thaws the sandbox whose backend id is id where a Freeze was
	// left in place (its caller died before calling thaw); a sandbox
	// that is not frozen is left as it is.
	Thaw(id, dir string) error
}

// Audit actions of snapshots.
const (
	ActionSnapshot       = "snapshot"
	ActionSnapshotDelete = "snapshot_delete"
	ActionRestore        = "restore"
	ActionSnapshotExport = "snapshot_export"
)

func (m *Manager) snapshotter() (Snapshotter, error) {
	if s, ok := m.opts.Store.(Snapshotter); ok {
		return s, nil
	}
	return nil, m.missing("snapshots")
}

// DefaultSnapshotName is the name a snapshot of sandbox taken at t gets
// when none is given: <sandbox>-YYYYMMDD (the sandbox's part shortened
// so that the whole is a valid name).
func DefaultSnapshotName(sandbox string, t time.Time) string {
	suffix := "-" + t.Format("20060102")
	base := sandbox
	if len(base)+len(suffix) > 63 {
		base = strings.TrimRight(base[:63-len(suffix)], "-_")
	}
	return base + suffix
}

// DefaultRestoreName is the name of a sandbox restored from a snapshot of
// sandbox when none is given: <sandbox>-restored.
func DefaultRestoreName(sandbox string) string {
	const suffix = "-restored"
	if len(sandbox)+len(suffix) > 63 {
		sandbox = strings.TrimRight(sandbox[:63-len(suffix)], "-_")
	}
	return sandbox + suffix
}

// ValidateSnapshotName checks a snapshot name: the sandbox names' rule
// (it is also a file name in the data directory).
func ValidateSnapshotName(name string) error {
	if err := ValidateName(name); err != nil {
		return errors.New(strings.Replace(err.Error(), "sandbox name", "snapshot name", 1))
	}
	return nil
}

// TakeSnapshot snapshots the sandbox called sandbox as name (""
// for DefaultSnapshotName).
func (m *Manager) TakeSnapshot(ctx context.Context, sandbox, name string) (*Snapshot, error) {
	return m.TakeSnapshotWith(ctx, sandbox, name, SnapshotOptions{})
}

// TakeSnapshotWith is TakeSnapshot with options.
func (m *Manager) TakeSnapshotWith(ctx context.Context, sandbox, name string, opts SnapshotOptions) (*Snapshot, error) {
	sn, err := m.snapshotter()
	if err != nil {
		return nil, err
	}
	if err := ValidateName(sandbox); err != nil {
		return nil, err
	}
	if name == "" {
		name = DefaultSnapshotName(sandbox, time.Now())
	}
	if err := ValidateSnapshotName(name); err != nil {
		return nil, err
	}
	if st := m.opts.Store; st != nil {
		if info, err := st.Get(ctx, sandbox); err == nil {
			if what := m.remote(info.Backend); what != "" {
				return nil, fmt.Errorf("sandbox %s is %s on backend %s: its files are not on this host, so it has no snapshots: %w", sandbox, what, info.Backend, ErrUnsupported)
			}
		}
	}
	start := time.Now()
	var s *Snapshot
	details := "snapshot " + name
	if opts.Memory {
		ms, ok := sn.(MemorySnapshotter)
		if !ok {
			return nil, m.missing("memory snapshots")
		}
		details += " with memory"
		s, err = ms.TakeSnapshotWith(ctx, sandbox, name, opts)
	} else {
		s, err = sn.TakeSnapshot(ctx, sandbox, name)
	}
	if !errors.Is(err, ErrSandboxNotFound) {
		m.audit(audit.Entry{Sandbox: sandbox, Action: ActionSnapshot, Details: details}, start, err)
	}
	return s, err
}

// ListSnapshots returns every snapshot, oldest first.
func (m *Manager) ListSnapshots(ctx context.Context) ([]*Snapshot, error) {
	sn, err := m.snapshotter()
	if err != nil {
		return nil, err
	}
	return sn.ListSnapshots(ctx)
}

// GetSnapshot returns the snapshot called name.
func (m *Manager) GetSnapshot(ctx context.Context, name string) (*Snapshot, error) {
	sn, err := m.snapshotter()
	if err != nil {
		return nil, err
	}
	if err := ValidateSnapshotName(name); err != nil {
		return nil, err
	}
	return sn.GetSnapshot(ctx, name)
}

// RestoreSnapshot creates a new, stopped sandbox called as (""
// for <source sandbox>-restored) from the snapshot name.
func (m *Manager) RestoreSnapshot(ctx context.Context, name, as string) (*Info, error) {
	sn, err := m.snapshotter()
	if err != nil {
		return nil, err
	}
	if err := ValidateSnapshotName(name); err != nil {
		return nil, err
	}
	if as == "" {
		s, err := sn.GetSnapshot(ctx, name)
		if err != nil {
			return nil, err
		}
		as = DefaultRestoreName(s.Sandbox)
	}
	if err := ValidateName(as); err != nil {
		return nil, err
	}
	start := time.Now()
	info, err := sn.RestoreSnapshot(ctx, name, as)
	if !errors.Is(err, ErrSnapshotNotFound) && !errors.Is(err, ErrSandboxExists) {
		m.audit(audit.Entry{Sandbox: as, Action: ActionRestore, Details: "from snapshot " + name}, start, err)
	}
	return info, err
}

// ExportSnapshot runs export over the snapshot name and the spec a
// restore of it uses (its Rootfs: the layers, lowest first, their id
// map and the image's config) while the snapshot is held: a delete,
// take or restore waits until export returns. to says where the image
// goes, for the audit entry.
func (m *Manager) ExportSnapshot(ctx context.Context, name, to string, export func(ctx context.Context, snap *Snapshot, spec *Spec) error) error {
	h, ok := m.opts.Store.(SnapshotHolder)
	if !ok {
		return m.missing("snapshot export")
	}
	if err := ValidateSnapshotName(name); err != nil {
		return err
	}
	start := time.Now()
	snap, spec, release, err := h.HoldSnapshot(ctx, name)
	if errors.Is(err, ErrSnapshotNotFound) {
		return err
	}
	source := name // as delete's entries: the snapshot's name when its source is unknown
	if err == nil {
		source = snap.Sandbox
		err = export(ctx, snap, spec)
		release()
	}
	m.audit(audit.Entry{Sandbox: source, Action: ActionSnapshotExport, Details: "snapshot " + name + " to " + to}, start, err)
	return err
}

// DeleteSnapshot removes the snapshot called name.
func (m *Manager) DeleteSnapshot(ctx context.Context, name string) error {
	sn, err := m.snapshotter()
	if err != nil {
		return err
	}
	if err := ValidateSnapshotName(name); err != nil {
		return err
	}
	start := time.Now()
	err = sn.DeleteSnapshot(ctx, name)
	if !errors.Is(err, ErrSnapshotNotFound) {
		m.audit(audit.Entry{Sandbox: name, Action: ActionSnapshotDelete}, start, err)
	}
	return err
}

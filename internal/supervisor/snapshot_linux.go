package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/atomicfile"
	"github.com/agentkernel/agentkernel/internal/idshift"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/store"
)

// Snapshots (sandbox.Snapshotter).
//
// A snapshot is read-only overlay layers plus the spec they belong to:
// the sandbox's writable layers made read-only, its root's (upper/,
// stacked in Spec.Rootfs.Layers) and each copy-on-write volume's
// (cow<i>/upper/, stacked in Spec.Mounts[i].Layers over the volume's
// host directory):
//
//	<data-dir>/snapshots/<name>.json    the metadata: sandbox.Snapshot and
//	                                    the source's spec whose
//	                                    Rootfs.Layers is the whole stack;
//	                                    written last (temporary file,
//	                                    rename), so a snapshot is listed
//	                                    and restorable, or absent
//	<data-dir>/snapshots/layers/<id>/   one layer (a former writable layer)
//	<data-dir>/snapshots/lock           flock'ed by take, restore, delete
//	                                    and the layers' gc
//	<data-dir>/snapshots/<id>.pending   a stopped sandbox's writable layer
//	                                    on its way to layers/<id>: the next
//	                                    snapshot operation or gc finishes
//	                                    the move (recoverPending)
//
// Layers live apart from the names: a layer belongs to every sandbox
// whose spec stacks it (the snapshot's source, after a take of it while
// stopped, and every sandbox restored from it) and to every snapshot
// whose spec does. Deleting a snapshot removes its metadata; a layer
// goes when nothing refers to it any more (gcLayers, at each delete and
// in GC).
//
// Restore is one new record in the state store whose spec stacks the
// snapshot's layers under a fresh writable layer: no file is copied or
// touched, whatever the size.
//
// Ownership: a sandbox's writable layer is owned by its own block of
// host ids (as root), while image layers keep the image's ids
// (Rootfs.IDMap, the shift they were unpacked with) and every sandbox
// sees them through idmapped mounts into its block. A snapshot layer is
// made an image layer like those: at take time its owners are moved from
// the sandbox's block to the image's shift (a chown walk, idshift), so
// that any sandbox that stacks it sees the same owners, through the same
// idmapped mounts. A volume's layer is shown to the sandbox through the
// same idmapped mounts as the host directory under it, whose ids the
// sandbox sees as they are on disk: its owners move from the sandbox's
// block to no shift at all. Rootless, layers and writable layers are the caller's
// own files under the same map in every sandbox: nothing moves.
//
// Take: a stopped sandbox's writable layer is renamed into the store
// (constant time, plus the chown walk) and the sandbox's own spec then
// stacks it under a fresh writable layer. A running sandbox's overlay
// keeps using its writable layer, so it is copied (copyLayer: clones
// where the file system can) while the sandbox's processes are frozen
// (the backend's sandbox.Freezer, the cgroup freezer; freezeguard_linux.go
// thaws a sandbox whose taker died), then synced before the metadata is
// written; running sandboxes need root (the copy keeps every owner).

const (
	snapshotsDir = "snapshots"
	layersDir    = "layers"
	// tmpLayerPrefix names a layer being copied (removed by gcLayers
	// when a take was killed midway).
	tmpLayerPrefix = "tmp-"
	pendingSuffix  = ".pending"
)

// pendingMove is a stopped take's record of the move of its sandbox's
// writable layer, written before the rename and removed once the
// sandbox's spec stacks the layer: a take killed midway leaves the
// layer to be stacked (the move finished), never to be collected as
// nobody's.
type pendingMove struct {
	Sandbox string `json:"sandbox"`
	Layer   string `json:"layer"`
	// Mount is the index in Spec.Mounts of the copy-on-write volume
	// whose layer this is; nil for the root's.
	Mount *int   `json:"mount,omitempty"`
	From  uint32 `json:"from"`
	To    uint32 `json:"to"`
	Size  uint32 `json:"size"`
}

// snapshotMeta is a snapshot's metadata file.
type snapshotMeta struct {
	sandbox.Snapshot
	// Spec is the source sandbox's spec, its Rootfs.Layers the whole
	// stack a restored sandbox mounts.
	Spec json.RawMessage `json:"spec"`
	// Own are the layers this snapshot's take made.
	Own []string `json:"own_layers,omitempty"`
}

func (m *Manager) snapshotsDir() string { return filepath.Join(m.DataDir, snapshotsDir) }

// metaPath is the metadata file of the snapshot name, which must be a
// valid name (no separator, no dot: no way out of the directory).
func (m *Manager) metaPath(name string) (string, error) {
	if err := sandbox.ValidateSnapshotName(name); err != nil {
		return "", err
	}
	return filepath.Join(m.snapshotsDir(), name+".json"), nil
}

// lockSnapshots takes the snapshots' lock.
func (m *Manager) lockSnapshots() (func(), error) {
	dir := m.snapshotsDir()
	if err := os.MkdirAll(filepath.Join(dir, layersDir), 0o700); err != nil {
		return nil, err
	}
	return atomicfile.Lock(filepath.Join(dir, "lock"))
}

func (m *Manager) readMeta(name string) (*snapshotMeta, error) {
	p, err := m.metaPath(name)
	if err != nil {
		return nil, err
	}
	b, err := readNoFollow(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%q: %w", name, sandbox.ErrSnapshotNotFound)
	}
	if err != nil {
		return nil, err
	}
	var sm snapshotMeta
	if err := json.Unmarshal(b, &sm); err != nil {
		return nil, fmt.Errorf("snapshot %q: %w", name, err)
	}
	sm.Name = name
	return &sm, nil
}

func readNoFollow(p string) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil || n == 0 {
			return b, nil
		}
		if len(b) > 16<<20 {
			return nil, fmt.Errorf("%s: too large", p)
		}
	}
}

// GetSnapshot returns the snapshot called name.
func (m *Manager) GetSnapshot(_ context.Context, name string) (*sandbox.Snapshot, error) {
	sm, err := m.readMeta(name)
	if err != nil {
		return nil, err
	}
	return &sm.Snapshot, nil
}

// ListSnapshots returns every snapshot, oldest first.
func (m *Manager) ListSnapshots(_ context.Context) ([]*sandbox.Snapshot, error) {
	metas, err := m.listMetas()
	if err != nil {
		return nil, err
	}
	out := make([]*sandbox.Snapshot, 0, len(metas))
	for _, sm := range metas {
		out = append(out, &sm.Snapshot)
	}
	return out, nil
}

func (m *Manager) listMetas() ([]*snapshotMeta, error) {
	ents, err := os.ReadDir(m.snapshotsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*snapshotMeta
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !e.Type().IsRegular() || sandbox.ValidateSnapshotName(name) != nil {
			continue // temporary files, the lock, layers
		}
		sm, err := m.readMeta(name)
		if errors.Is(err, sandbox.ErrSnapshotNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, sm)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// writable is one writable layer of a sandbox that a take turns into a
// snapshot layer: the root's (mount -1) or that of the copy-on-write
// volume Spec.Mounts[mount] (cow<i>/upper).
type writable struct {
	upper string
	mount int
	shift idShift
}

// writables lists the sandbox's writable layers that exist on disk (in
// dir): the root's first, then its copy-on-write volumes', in the order
// of Spec.Mounts. rootShift moves the root layer's owners to the
// image's; a volume's owners move to no shift at all (a volume's lower
// layer, the host directory, is shown to the sandbox as its own ids).
func writables(spec *sandbox.Spec, dir string, rootShift idShift) ([]writable, error) {
	var out []writable
	isDir := func(p string) (bool, error) {
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if !fi.IsDir() {
			return false, fmt.Errorf("%s: not a directory", p)
		}
		return true, nil
	}
	if !spec.Rootfs.Host {
		p := filepath.Join(dir, "upper")
		if ok, err := isDir(p); err != nil {
			return nil, err
		} else if ok {
			out = append(out, writable{upper: p, mount: -1, shift: rootShift})
		}
	}
	for i, mt := range spec.Mounts {
		if mt.Kind != sandbox.MountCopyOnWrite || mt.ReadOnly {
			continue
		}
		p := filepath.Join(dir, "cow"+strconv.Itoa(i), "upper")
		ok, err := isDir(p)
		if err != nil {
			return nil, err
		}
		if ok {
			sh := rootShift
			sh.to, sh.moves = 0, sh.from != 0
			out = append(out, writable{upper: p, mount: i, shift: sh})
		}
	}
	return out, nil
}

// TakeSnapshot turns the writable layers of the sandbox src (its
// root's and those of its copy-on-write volumes) into the snapshot name.
func (m *Manager) TakeSnapshot(ctx context.Context, src, name string) (*sandbox.Snapshot, error) {
	return m.TakeSnapshotWith(ctx, src, name, sandbox.SnapshotOptions{})
}

// TakeSnapshotWith is TakeSnapshot with options
// (sandbox.MemorySnapshotter): with Memory, the running sandbox's memory
// too, taken by its backend's sandbox.Checkpointer in the same freeze as
// its files, into memoryDir(name).
func (m *Manager) TakeSnapshotWith(ctx context.Context, src, name string, opts sandbox.SnapshotOptions) (*sandbox.Snapshot, error) {
	metaPath, err := m.metaPath(name)
	if err != nil {
		return nil, err
	}
	if err := sandbox.ValidateName(src); err != nil {
		return nil, err
	}
	unlockSnaps, err := m.lockSnapshots()
	if err != nil {
		return nil, err
	}
	defer unlockSnaps()
	if err := m.recoverPending(ctx); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(metaPath); err == nil {
		return nil, fmt.Errorf("%q: %w", name, sandbox.ErrSnapshotExists)
	}
	st, sb, unlockSb, err := m.lockedGet(ctx, src)
	if err != nil {
		return nil, err
	}
	// The sandbox's lock goes as soon as its layers are taken (a running
	// sandbox's copy is thawed), before the copy is made durable.
	var once sync.Once
	unlock := func() { once.Do(unlockSb) }
	defer unlock()
	var spec sandbox.Spec
	if err := json.Unmarshal(sb.Spec, &spec); err != nil {
		return nil, fmt.Errorf("the spec of sandbox %q: %w", src, err)
	}
	if spec.Rootfs.Host {
		return nil, fmt.Errorf("sandbox %q runs the host's own tools (read-only): it has no writable layer to snapshot: %w", src, sandbox.ErrUnsupported)
	}
	if spec.Backend == "docker" || spec.Backend == "podman" {
		// Its root's writable layer is the engine's, not a directory this
		// package knows (native and gvisor keep theirs in the sandbox's
		// directory, which is what a snapshot takes).
		return nil, fmt.Errorf("sandbox %q runs on backend %s, which has no snapshots yet (sandboxes on native and gvisor do): %w", src, spec.Backend, sandbox.ErrUnsupported)
	}
	dir := m.Dir(src)
	var memory func() error
	memDir := m.memoryDir(name)
	if opts.Memory {
		ck, _ := m.freezer(spec.Backend).(sandbox.Checkpointer)
		switch {
		case ck == nil:
			return nil, fmt.Errorf("sandbox %q runs on backend %s, which has no memory snapshots (gvisor sandboxes do); take one without --memory: %w", src, backendName(spec.Backend), sandbox.ErrUnsupported)
		case sb.Status != store.StatusRunning:
			return nil, fmt.Errorf("sandbox %q is not running: a memory snapshot takes a running sandbox's processes; start it first, or take one without --memory: %w", src, sandbox.ErrUnsupported)
		}
		if err := os.MkdirAll(filepath.Dir(memDir), 0o700); err != nil {
			return nil, err
		}
		// What a killed take left (no metadata names it).
		if err := os.RemoveAll(memDir); err != nil {
			return nil, err
		}
		memory = func() error {
			ids, err := ck.Checkpoint(&spec, dir, memDir)
			if err != nil {
				return err
			}
			return copyDetached(filepath.Join(dir, "detached"), filepath.Join(memDir, "detached"), ids)
		}
		defer func() {
			if _, err := os.Lstat(metaPath); err != nil {
				_ = os.RemoveAll(memDir)
			}
		}()
	}
	if err := m.thawLeftover(&spec, dir); err != nil {
		return nil, err
	}
	sh, err := m.ownerShift(&spec, dir)
	if err != nil {
		return nil, err
	}
	ws, err := writables(&spec, dir, sh)
	if err != nil {
		return nil, err
	}
	layers := m.snapshotsDir() + "/" + layersDir
	var finals []string
	switch {
	case len(ws) == 0:
		// Never started: the snapshot is its image.
	case sb.Status == store.StatusRunning:
		if finals, err = m.copyRunning(&spec, dir, ws, layers, unlock, memory); err != nil {
			return nil, err
		}
	default:
		for _, w := range ws {
			id, err := randomHex()
			if err != nil {
				return nil, err
			}
			final := filepath.Join(layers, id)
			if err := m.moveStopped(ctx, st, src, w, final); err != nil {
				return nil, err
			}
			finals = append(finals, final)
		}
	}
	unlock()
	snapSpec := spec
	snapSpec.Rootfs.Layers = slices.Clone(spec.Rootfs.Layers)
	snapSpec.Mounts = slices.Clone(spec.Mounts)
	for i, w := range ws[:len(finals)] {
		if w.mount < 0 {
			snapSpec.Rootfs.Layers = append(snapSpec.Rootfs.Layers, finals[i])
		} else {
			mt := &snapSpec.Mounts[w.mount]
			mt.Layers = append(slices.Clone(mt.Layers), finals[i])
		}
	}
	snapSpec.ID, snapSpec.Name = "", ""
	specJSON, err := json.Marshal(&snapSpec)
	if err != nil {
		return nil, err
	}
	sm := snapshotMeta{Snapshot: sandbox.Snapshot{Name: name, Sandbox: src, Backend: sb.Backend, BaseImage: sb.Image,
		MemoryMB: spec.Resources.MemoryMB, Layers: len(snapSpec.Rootfs.Layers), CreatedAt: time.Now().UTC(), Memory: opts.Memory}, Spec: specJSON, Own: finals}
	if c := spec.Resources.CPUPercent; c > 0 {
		sm.VCPUs = (c + 99) / 100
	}
	b, err := json.MarshalIndent(&sm, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := atomicfile.WriteFile(metaPath, b, 0o600); err != nil {
		// A running sandbox's copy is nobody's: gcLayers removes it. A
		// stopped one's layer is its source's now, and stays.
		return nil, err
	}
	return &sm.Snapshot, nil
}

// idShift moves the ids of one block to another (none when !moves).
type idShift struct {
	from, to, size uint32
	moves          bool
}

func (s idShift) apply(id uint32) uint32 {
	if s.moves && id >= s.from && id-s.from < s.size {
		return s.to + (id - s.from)
	}
	return id
}

// ownerShift returns how the owners of the sandbox's writable layer
// (whose files live in dir) move to the image's shift: not at all
// rootless, with --userns=host, or before the sandbox's first start.
func (m *Manager) ownerShift(spec *sandbox.Spec, dir string) (idShift, error) {
	if os.Geteuid() != 0 || spec.Security.HostUserNS {
		return idShift{}, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "idrange"))
	if errors.Is(err, fs.ErrNotExist) {
		return idShift{}, nil
	}
	if err != nil {
		return idShift{}, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return idShift{}, fmt.Errorf("%s: %w", filepath.Join(dir, "idrange"), err)
	}
	sh := idShift{from: uint32(n), to: spec.Rootfs.IDMap.UID, size: spec.Rootfs.IDMap.Size}
	if sh.size == 0 {
		sh.size = 65536
	}
	sh.moves = sh.from != sh.to
	return sh, nil
}

// moveStopped makes the stopped sandbox's writable layer w the layer
// final and stacks it in the sandbox's spec: a rename, the owners moved
// (w.shift), the spec updated; each step undone when a later one fails.
func (m *Manager) moveStopped(ctx context.Context, st *store.Store, name string, w writable, final string) error {
	pm := pendingMove{Sandbox: name, Layer: final}
	if w.mount >= 0 {
		pm.Mount = &w.mount
	}
	sh := w.shift
	if sh.moves {
		pm.From, pm.To, pm.Size = sh.from, sh.to, sh.size
	}
	marker := filepath.Join(m.snapshotsDir(), filepath.Base(final)+pendingSuffix)
	b, err := json.Marshal(&pm)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(marker, b, 0o600); err != nil {
		return err
	}
	defer os.Remove(marker)
	if err := os.Rename(w.upper, final); err != nil {
		if errors.Is(err, unix.EXDEV) {
			return fmt.Errorf("the data directory's sandboxes and snapshots are on different file systems: %w", err)
		}
		return err
	}
	undo := func() {
		if sh.moves {
			_ = idshift.Tree(final, sh.to, sh.from, sh.size, nil)
		}
		_ = os.Rename(final, w.upper)
	}
	if sh.moves {
		if err := idshift.Tree(final, sh.from, sh.to, sh.size, nil); err != nil {
			undo()
			return fmt.Errorf("moving the layer's files to the image's owners: %w", err)
		}
	}
	if err := m.stackLayer(ctx, st, name, final, w.mount); err != nil {
		undo()
		return err
	}
	return nil
}

// stackLayer puts layer on top of the read-only layers of the sandbox
// name's root (mount -1) or of its copy-on-write volume Mounts[mount]
// (unless it is there already).
func (m *Manager) stackLayer(ctx context.Context, st *store.Store, name, layer string, mount int) error {
	var newSpec []byte
	_, err := st.Update(ctx, name, func(s *store.Sandbox) error {
		var cur sandbox.Spec
		if err := json.Unmarshal(s.Spec, &cur); err != nil {
			return err
		}
		stack := &cur.Rootfs.Layers
		if mount >= 0 {
			if mount >= len(cur.Mounts) || cur.Mounts[mount].Kind != sandbox.MountCopyOnWrite {
				return fmt.Errorf("sandbox %q has no copy-on-write volume %d", name, mount)
			}
			stack = &cur.Mounts[mount].Layers
		}
		if slices.Contains(*stack, layer) {
			return nil
		}
		*stack = append(*stack, layer)
		b, err := json.Marshal(&cur)
		if err != nil {
			return err
		}
		s.Spec, newSpec = b, b
		return nil
	})
	if err != nil {
		return storeErr(name, err)
	}
	if newSpec != nil {
		// The next start writes spec.json from the store; it is written
		// now too, so that no reader of the directory sees the old stack.
		_ = atomicfile.WriteFile(filepath.Join(m.Dir(name), "spec.json"), newSpec, 0o600)
	}
	return nil
}

// recoverPending finishes the moves of stopped takes that were killed
// midway (pendingMove): a layer that made it into the store gets the
// image's owners and is stacked by its sandbox, which then sees its
// files again (under whatever it wrote since); a move that never
// happened, or whose sandbox is gone, leaves only its record, removed.
func (m *Manager) recoverPending(ctx context.Context) error {
	ents, err := os.ReadDir(m.snapshotsDir())
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), pendingSuffix) || !e.Type().IsRegular() {
			continue
		}
		marker := filepath.Join(m.snapshotsDir(), e.Name())
		b, err := readNoFollow(marker)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var pm pendingMove
		layers := filepath.Join(m.snapshotsDir(), layersDir)
		if err := json.Unmarshal(b, &pm); err != nil || filepath.Dir(pm.Layer) != layers || sandbox.ValidateName(pm.Sandbox) != nil {
			errs = append(errs, fmt.Errorf("%s: not a pending move", marker))
			continue
		}
		if _, err := os.Lstat(pm.Layer); err == nil {
			st, err := m.Store(ctx)
			if err != nil {
				return err
			}
			if _, err := st.Get(ctx, pm.Sandbox); err == nil {
				if pm.Size > 0 {
					if err := idshift.Tree(pm.Layer, pm.From, pm.To, pm.Size, nil); err != nil {
						errs = append(errs, err)
						continue
					}
				}
				mount := -1
				if pm.Mount != nil {
					mount = *pm.Mount
				}
				if err := m.stackLayer(ctx, st, pm.Sandbox, pm.Layer, mount); err != nil {
					errs = append(errs, err)
					continue
				}
			} else if !errors.Is(err, store.ErrNotFound) {
				errs = append(errs, err)
				continue
			}
		}
		if err := os.Remove(marker); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// copyRunning copies the running sandbox's writable layers ws into new
// layers under layers, with its processes frozen (freezeGuard: a take
// that dies meanwhile is thawed by the supervisor or the next start),
// then calls release (the sandbox may change again), makes the copies
// durable and renames them into place. It returns their paths, in the
// order of ws.
func (m *Manager) copyRunning(spec *sandbox.Spec, dir string, ws []writable, layers string, release func(), memory func() error) ([]string, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("a snapshot of a running sandbox needs root (its files keep their owners); stop the sandbox first: a stopped sandbox's snapshot takes its writable layer as it is: %w", sandbox.ErrUnsupported)
	}
	fz := m.freezer(spec.Backend)
	if fz == nil {
		return nil, fmt.Errorf("backend %s cannot hold a running sandbox still while its files are copied; stop the sandbox first: a stopped sandbox's snapshot takes its writable layer as it is: %w", backendName(spec.Backend), sandbox.ErrUnsupported)
	}
	tmps := make([]string, len(ws))
	finals := make([]string, len(ws))
	for i := range ws {
		id, err := randomHex()
		if err != nil {
			return nil, err
		}
		tmps[i], finals[i] = filepath.Join(layers, tmpLayerPrefix+id), filepath.Join(layers, id)
	}
	cleanup := func() {
		for i := range ws {
			_ = os.RemoveAll(tmps[i])
			_ = os.RemoveAll(finals[i])
		}
	}
	err := withFrozen(fz, spec.ID, dir, func() error {
		// The copy reads what the sandbox wrote through the page cache:
		// no sync is needed while it is frozen.
		for i, w := range ws {
			if err := copyLayer(w.upper, tmps[i], w.shift.apply); err != nil {
				return err
			}
		}
		if memory != nil {
			// The memory in the same freeze: the files it expects.
			if err := memory(); err != nil {
				return fmt.Errorf("the sandbox's memory: %w", err)
			}
		}
		return nil
	})
	release()
	if err == nil {
		// The copies reach the disk before the snapshot is listed.
		err = syncfs(layers)
	}
	for i := 0; err == nil && i < len(ws); i++ {
		err = os.Rename(tmps[i], finals[i])
	}
	if err == nil {
		err = atomicfile.SyncDir(layers)
	}
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("copying the writable layer: %w", err)
	}
	return finals, nil
}

func syncfs(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

func randomHex() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// RestoreSnapshot creates the stopped sandbox as, whose spec stacks the
// snapshot's layers under a fresh writable layer.
func (m *Manager) RestoreSnapshot(ctx context.Context, name, as string) (*sandbox.Info, error) {
	if err := sandbox.ValidateName(as); err != nil {
		return nil, err
	}
	unlock, err := m.lockSnapshots()
	if err != nil {
		return nil, err
	}
	defer unlock()
	sm, err := m.readMeta(name)
	if err != nil {
		return nil, err
	}
	spec, err := sm.stack()
	if err != nil {
		return nil, err
	}
	spec.Name, spec.ID = as, ""
	info := &sandbox.Info{Name: as, Image: spec.Image, ImageDigest: spec.Rootfs.Digest, RequestedImage: spec.RequestedImage,
		Backend: sm.Backend, Status: sandbox.StatusStopped, Profile: spec.Profile, Resources: spec.Resources,
		Description: "restored from snapshot " + name}
	if err := m.Create(ctx, info, spec); err != nil {
		return nil, err
	}
	if sm.Memory {
		if err := m.placeMemory(name, m.Dir(as)); err != nil {
			_ = m.Remove(ctx, as, true)
			return nil, fmt.Errorf("the snapshot's memory: %w", err)
		}
	}
	return m.Get(ctx, as)
}

// memoryDir is where the memory of the snapshot name is kept.
func (m *Manager) memoryDir(name string) string {
	return filepath.Join(m.snapshotsDir(), memoryDirName, name)
}

// memoryDirName holds, in the snapshots' directory, one directory per
// memory snapshot (root's only: runsc writes its image's files
// readable by all): the backend's image, and in detached/ the records
// of the detached commands it holds.
const memoryDirName = "memory"

// placeMemory gives the new sandbox whose directory is dir the memory
// of the snapshot name, for its first start (sandbox.MemoryDir, which
// the backend's boot consumes): the image's files linked (copied across
// file systems), the detached commands' records copied into its
// detached/ as the agent keeps them.
func (m *Manager) placeMemory(name, dir string) error {
	src := m.memoryDir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	to := filepath.Join(dir, sandbox.MemoryDir)
	if err := os.RemoveAll(to); err != nil {
		return err
	}
	if err := linkTree(src, to, func(rel string) bool { return rel != "detached" }); err != nil {
		_ = os.RemoveAll(to)
		return err
	}
	ents, err := os.ReadDir(filepath.Join(src, "detached"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var ids []string
	for _, e := range ents {
		ids = append(ids, e.Name())
	}
	return copyDetached(filepath.Join(src, "detached"), filepath.Join(dir, "detached"), ids)
}

// linkTree makes to a copy of the tree src (directories 0700, regular
// files hard-linked where they can be, else copied; nothing else), the
// top-level entries for which keep returns false left out.
func linkTree(src, to string, keep func(rel string) bool) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if rel != "." && !strings.Contains(rel, string(filepath.Separator)) && !keep(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		dst := filepath.Join(to, rel)
		switch {
		case d.IsDir():
			return os.Mkdir(dst, 0o700)
		case d.Type().IsRegular():
			if err := os.Link(p, dst); err == nil {
				return nil
			}
			return copyPlain(p, dst)
		}
		return nil // links and the like: none is made
	})
}

// copyDetached copies the records (meta.json, stdout, stderr) of the
// detached commands ids from the directory from into to, regular files
// only, never through a link.
func copyDetached(from, to string, ids []string) error {
	for _, id := range ids {
		if sandbox.ValidDetachedID(id) != nil {
			continue
		}
		if err := os.MkdirAll(filepath.Join(to, id), 0o700); err != nil {
			return err
		}
		for _, f := range []string{"meta.json", "stdout", "stderr"} {
			if err := copyPlain(filepath.Join(from, id, f), filepath.Join(to, id, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// copyPlain copies the regular file src (not followed if a link) to the
// new file dst (0600).
func copyPlain(src, dst string) error {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	if st, err := in.Stat(); err != nil {
		return err
	} else if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", src)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// HoldSnapshot returns the snapshot name and the spec a restore of it
// uses, every layer of its stack checked to be there, with the
// snapshots' lock held until release: no take, restore, delete or gc
// of layers runs (they wait) while an export reads the layers.
func (m *Manager) HoldSnapshot(_ context.Context, name string) (*sandbox.Snapshot, *sandbox.Spec, func(), error) {
	if _, err := m.metaPath(name); err != nil {
		return nil, nil, nil, err
	}
	unlock, err := m.lockSnapshots()
	if err != nil {
		return nil, nil, nil, err
	}
	sm, err := m.readMeta(name)
	if err != nil {
		unlock()
		return nil, nil, nil, err
	}
	spec, err := sm.stack()
	if err != nil {
		unlock()
		return nil, nil, nil, err
	}
	return &sm.Snapshot, spec, unlock, nil
}

// stack decodes the snapshot's spec, every layer of its stack checked
// to be there.
func (sm *snapshotMeta) stack() (*sandbox.Spec, error) {
	var spec sandbox.Spec
	if err := json.Unmarshal(sm.Spec, &spec); err != nil {
		return nil, fmt.Errorf("the spec of snapshot %q: %w", sm.Name, err)
	}
	all := slices.Clone(spec.Rootfs.Layers)
	for _, mt := range spec.Mounts {
		all = append(all, mt.Layers...)
	}
	for _, l := range all {
		if _, err := os.Stat(l); err != nil {
			return nil, fmt.Errorf("snapshot %q: layer %s: %w", sm.Name, l, err)
		}
	}
	return &spec, nil
}

// DeleteSnapshot removes the snapshot's metadata, then the layers that
// nothing refers to any more.
func (m *Manager) DeleteSnapshot(ctx context.Context, name string) error {
	p, err := m.metaPath(name)
	if err != nil {
		return err
	}
	unlock, err := m.lockSnapshots()
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%q: %w", name, sandbox.ErrSnapshotNotFound)
	}
	if err := os.Remove(p); err != nil {
		return err
	}
	_ = os.RemoveAll(m.memoryDir(name))
	_ = atomicfile.SyncDir(m.snapshotsDir())
	_, err = m.gcLayersLocked(ctx, false)
	return err
}

// gcLayers removes the snapshot layers that no snapshot and no sandbox
// stacks, and copies a killed take left.
func (m *Manager) gcLayers(ctx context.Context, dryRun bool) ([]string, error) {
	if _, err := os.Stat(m.snapshotsDir()); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	unlock, err := m.lockSnapshots()
	if err != nil {
		return nil, err
	}
	defer unlock()
	return m.gcLayersLocked(ctx, dryRun)
}

func (m *Manager) gcLayersLocked(ctx context.Context, dryRun bool) ([]string, error) {
	if !dryRun {
		if err := m.recoverPending(ctx); err != nil {
			return nil, err
		}
	} else if pending, _ := filepath.Glob(filepath.Join(m.snapshotsDir(), "*"+pendingSuffix)); len(pending) > 0 {
		return nil, nil // the layers of unfinished moves are not judged
	}
	used, err := m.StackedLayers(ctx)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	// Memory a killed take left: no snapshot's metadata names it.
	mems, _ := os.ReadDir(filepath.Join(m.snapshotsDir(), memoryDirName))
	for _, e := range mems {
		if _, err := os.Lstat(filepath.Join(m.snapshotsDir(), e.Name()+".json")); err == nil && sandbox.ValidateSnapshotName(e.Name()) == nil {
			continue
		}
		p := filepath.Join(m.snapshotsDir(), memoryDirName, e.Name())
		removed = append(removed, "snapshot memory "+p)
		if !dryRun {
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	dir := filepath.Join(m.snapshotsDir(), layersDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if len(used[p]) > 0 {
			continue
		}
		removed = append(removed, "snapshot layer "+p)
		if !dryRun {
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return removed, errors.Join(errs...)
}

// StackedLayers returns every read-only layer directory (cleaned path)
// that a snapshot or a sandbox of the state store stacks, its root's or
// a copy-on-write volume's, with who stacks it ("snapshot NAME",
// "sandbox NAME"; snapshots first, each group by name). Image layers are
// among them: the image store's prune keeps these. A spec that cannot be
// read might stack any layer: that is an error, never a shorter list.
func (m *Manager) StackedLayers(ctx context.Context) (map[string][]string, error) {
	used := map[string][]string{}
	addSpec := func(b []byte, who string) error {
		if len(b) == 0 {
			return nil
		}
		var s struct {
			Rootfs struct {
				Layers []string `json:"layers"`
			} `json:"rootfs"`
			Mounts []struct {
				Layers []string `json:"layers"`
			} `json:"mounts"`
		}
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		all := s.Rootfs.Layers
		for _, mt := range s.Mounts {
			all = append(all, mt.Layers...)
		}
		for _, l := range all {
			l = filepath.Clean(l)
			if !slices.Contains(used[l], who) {
				used[l] = append(used[l], who)
			}
		}
		return nil
	}
	metas, err := m.listMetas()
	if err != nil {
		return nil, err
	}
	sort.Slice(metas, func(i, j int) bool { return metas[i].Name < metas[j].Name })
	for _, sm := range metas {
		if err := addSpec(sm.Spec, "snapshot "+sm.Name); err != nil {
			return nil, fmt.Errorf("snapshot %q: %w", sm.Name, err)
		}
	}
	st, err := m.Store(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := st.List(ctx)
	if err != nil {
		return nil, err
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	for _, sb := range rows {
		if err := addSpec(sb.Spec, "sandbox "+sb.Name); err != nil {
			return nil, fmt.Errorf("sandbox %q: %w", sb.Name, err)
		}
	}
	return used, nil
}

var (
	_ sandbox.Snapshotter    = (*Manager)(nil)
	_ sandbox.SnapshotHolder = (*Manager)(nil)
)

// pendingFor reports whether a stopped take of the sandbox name left a
// move to finish (recoverPending).
func (m *Manager) pendingFor(name string) bool {
	ms, _ := filepath.Glob(filepath.Join(m.snapshotsDir(), "*"+pendingSuffix))
	for _, p := range ms {
		b, err := readNoFollow(p)
		if err != nil {
			continue
		}
		var pm pendingMove
		if json.Unmarshal(b, &pm) == nil && pm.Sandbox == name {
			return true
		}
	}
	return false
}

// finishPending finishes the moves of stopped takes that were cut short
// (recoverPending) under the snapshots' lock.
func (m *Manager) finishPending(ctx context.Context) error {
	unlock, err := m.lockSnapshots()
	if err != nil {
		return err
	}
	defer unlock()
	return m.recoverPending(ctx)
}

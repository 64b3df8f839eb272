package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/atomicfile"
	"github.com/agentkernel/agentkernel/internal/netstack/tundev"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/sandboxdir"
	"github.com/agentkernel/agentkernel/internal/store"
)

// ErrNotRunning means the sandbox exists but is stopped.
var ErrNotRunning = sandbox.ErrNotRunning

// Manager is the mechanism under persistent sandboxes: state in the
// store, one supervisor process per running sandbox. It implements
// sandbox.Store, sandbox.Supervisor, sandbox.Connector and
// sandbox.HostStats; the faces reach it through sandbox.Manager.
//
// The state store is opened on first use: the exec path (socket of a
// running sandbox) never opens it.
type Manager struct {
	DataDir string
	// SuperviseCommand is what runs the supervisor of name: the program,
	// then its argv (argv[0] first)
	// (this binary's hidden `sandbox supervise` command).
	SuperviseCommand func(name string) []string
	// Reclaimer frees what sandboxes hold on the host outside their
	// directories (cgroups, host ids), and Meter reads their figures
	// as the host sees them: the backend that boots them in Serve.
	// Either may be nil (nothing to free, no such figures).
	Reclaimer sandbox.Reclaimer
	Meter     sandbox.Meter
	// Freezers holds still the running sandboxes of the backends other
	// than native's (the Reclaimer's) while a snapshot copies their
	// files, by backend name (Spec.Backend); a backend missing has none.
	Freezers map[string]sandbox.Freezer
	// CgroupRemovers remove what cgroups the sandboxes of the backends
	// other than native's (the Reclaimer's) left, by backend name.
	CgroupRemovers map[string]sandbox.CgroupRemover
	// Expired, when set, is told of each sandbox that List, Start or GC
	// removed because its expiry had passed (err: how the removal
	// failed, nil when it went), for the audit log.
	Expired func(name string, at time.Time, err error)

	mu sync.Mutex
	st *store.Store
}

var (
	_ sandbox.Store      = (*Manager)(nil)
	_ sandbox.Supervisor = (*Manager)(nil)
	_ sandbox.Connector  = (*Manager)(nil)
	_ sandbox.HostStats  = (*Manager)(nil)
)

// removeCgroups removes the cgroups sb's sandbox left (through its
// backend's remover: the Reclaimer for native's, CgroupRemovers' for
// the others; none without one) and returns what it removed.
func (m *Manager) removeCgroups(sb *store.Sandbox) []string {
	return m.removeCgroupsOf(specBackend(sb), SpecID(sb))
}

// removeCgroupsOf removes the cgroups of the sandbox with backend id id
// on backend ("" is native).
func (m *Manager) removeCgroupsOf(backend, id string) []string {
	if id == "" {
		return nil
	}
	var r sandbox.CgroupRemover
	if backend == "" || strings.EqualFold(backend, "native") {
		if m.Reclaimer != nil {
			r = m.Reclaimer
		}
	} else if c, ok := m.CgroupRemovers[strings.ToLower(backend)]; ok {
		r = c
	}
	if r == nil {
		return nil
	}
	return r.RemoveCgroups(id)
}

// specBackend is the backend sb's spec names ("" for native's).
func specBackend(sb *store.Sandbox) string {
	var spec struct {
		Backend string `json:"backend"`
	}
	_ = json.Unmarshal(sb.Spec, &spec)
	return spec.Backend
}

// Store opens (once) and returns the state store.
func (m *Manager) Store(ctx context.Context) (*store.Store, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.st != nil {
		return m.st, nil
	}
	st, err := store.Open(ctx, m.DataDir)
	if err != nil {
		return nil, err
	}
	m.st = st
	return st, nil
}

// Close closes the state store if it was opened.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.st == nil {
		return nil
	}
	err := m.st.Close()
	m.st = nil
	return err
}

// Dir is the sandbox's directory.
func (m *Manager) Dir(name string) string { return filepath.Join(m.DataDir, "sandboxes", name) }

// lock takes the sandbox's lock (its directory's lock file).
func (m *Manager) lock(name string) (func(), error) {
	dir := m.Dir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return atomicfile.Lock(filepath.Join(dir, "lock"))
}

// storeErr maps the store's errors to the sandbox package's.
func storeErr(name string, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%q: %w", name, sandbox.ErrSandboxNotFound)
	case errors.Is(err, store.ErrExists):
		return fmt.Errorf("%q: %w", name, sandbox.ErrSandboxExists)
	}
	return err
}

// info converts a row to what the faces see.
func (m *Manager) info(sb *store.Sandbox) *sandbox.Info {
	i := &sandbox.Info{Name: sb.Name, UUID: sb.UUID, Image: sb.Image, ImageDigest: sb.ImageDigest, Backend: sb.Backend,
		Status: sb.Status, StopReason: sb.StopReason, Profile: sb.Profile, Labels: sb.Labels, Description: sb.Description,
		CreatedAt: sb.CreatedAt, LastActivityAt: sb.LastActivityAt, ExpiresAt: sb.ExpiresAt, Dir: m.Dir(sb.Name)}
	if len(sb.Resources) > 0 {
		_ = json.Unmarshal(sb.Resources, &i.Resources)
	}
	if sb.Status == store.StatusRunning {
		i.SupervisorPID = sb.SupervisorPID
	}
	var sp struct {
		Network        sandbox.Network `json:"network"`
		RequestedImage string          `json:"requested_image"`
	}
	if len(sb.Spec) > 0 && json.Unmarshal(sb.Spec, &sp) == nil {
		i.Network, i.Ports = sp.Network.Mode, sp.Network.Ports
		i.RequestedImage = sp.RequestedImage
		if sp.Network.Mode.Egress() {
			i.IP = tundev.DefaultLayout().Addr4.Addr().String()
			if sb.Status == store.StatusRunning {
				if _, err := os.Lstat(filepath.Join(i.Dir, netProxyFile)); err == nil {
					i.IP = "" // proxy mode: no device, no address
				}
			}
		}
	}
	return i
}

// Create records a new (stopped) sandbox.
func (m *Manager) Create(ctx context.Context, info *sandbox.Info, spec *sandbox.Spec) error {
	st, err := m.Store(ctx)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(m.DataDir, "sandboxes"), 0o700); err != nil {
		return err
	}
	info.UUID = store.NewUUID()
	spec.ID = strings.ReplaceAll(info.UUID, "-", "")
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	res, err := json.Marshal(info.Resources)
	if err != nil {
		return err
	}
	rec := &store.Sandbox{Name: info.Name, UUID: info.UUID, Image: info.Image, ImageDigest: info.ImageDigest, Backend: info.Backend,
		Profile: info.Profile, Resources: res, Spec: specJSON, Labels: info.Labels, Description: info.Description, ExpiresAt: info.ExpiresAt}
	if err := st.Create(ctx, rec); err != nil {
		return storeErr(info.Name, err)
	}
	info.CreatedAt, info.LastActivityAt, info.Status, info.Dir = rec.CreatedAt, rec.LastActivityAt, rec.Status, m.Dir(info.Name)
	return nil
}

// Get returns the sandbox, its status reconciled with reality.
// A stopped sandbox whose expiry has passed is still shown (Start, List
// and GC remove it): a sandbox created with a TTL shorter than its
// creation is reported, and 'sandbox gc --dry-run' can name it.
func (m *Manager) Get(ctx context.Context, name string) (*sandbox.Info, error) {
	sb, err := m.get(ctx, name)
	if err != nil {
		return nil, err
	}
	return m.info(sb), nil
}

func (m *Manager) get(ctx context.Context, name string) (*store.Sandbox, error) {
	st, err := m.Store(ctx)
	if err != nil {
		return nil, err
	}
	sb, err := st.Get(ctx, name)
	if err != nil {
		return nil, storeErr(name, err)
	}
	return m.reconcile(ctx, sb)
}

// List returns every sandbox, reconciled; stopped sandboxes whose expiry
// has passed are removed and left out.
func (m *Manager) List(ctx context.Context) ([]*sandbox.Info, error) {
	return m.list(ctx, true)
}

// list is List; expire says whether to remove the stopped sandboxes
// that have expired (GC judges them itself).
func (m *Manager) list(ctx context.Context, expire bool) ([]*sandbox.Info, error) {
	st, err := m.Store(ctx)
	if err != nil {
		return nil, err
	}
	all, err := st.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*sandbox.Info, 0, len(all))
	for _, sb := range all {
		if sb, err = m.reconcile(ctx, sb); err != nil {
			if errors.Is(err, sandbox.ErrSandboxNotFound) || errors.Is(err, store.ErrNotFound) {
				continue // removed meanwhile (e.g. a warm pool's sandbox)
			}
			return nil, err
		}
		if expire {
			if gone, err := m.removeIfExpired(ctx, sb); err != nil {
				return nil, err
			} else if gone {
				continue
			}
		}
		out = append(out, m.info(sb))
	}
	return out, nil
}

// Update lets fn change labels, description and expiry of name in one
// transaction.
func (m *Manager) Update(ctx context.Context, name string, fn func(*sandbox.Info) error) (*sandbox.Info, error) {
	st, err := m.Store(ctx)
	if err != nil {
		return nil, err
	}
	sb, err := st.Update(ctx, name, func(s *store.Sandbox) error {
		i := m.info(s)
		if err := fn(i); err != nil {
			return err
		}
		s.Labels, s.Description, s.ExpiresAt = i.Labels, i.Description, i.ExpiresAt
		return nil
	})
	if err != nil {
		return nil, storeErr(name, err)
	}
	// The supervisor of a running sandbox keeps its expiry (ttl_linux.go).
	if _, err := os.Stat(m.Dir(name)); err == nil {
		if err := writeExpiry(m.Dir(name), sb.ExpiresAt); err != nil {
			return nil, fmt.Errorf("recording the expiry of sandbox %q for its supervisor: %w", name, err)
		}
	}
	return m.info(sb), nil
}

// alive reports whether the recorded supervisor still runs.
func alive(sb *store.Sandbox) bool {
	if sb.SupervisorPID <= 0 {
		return false
	}
	st, err := ProcStart(sb.SupervisorPID)
	return err == nil && st == sb.SupervisorStart
}

func (m *Manager) reconcile(ctx context.Context, sb *store.Sandbox) (*store.Sandbox, error) {
	// Execs are recorded by their clients as the mtime of "activity"
	// (no database write on the exec path).
	if fi, err := os.Stat(filepath.Join(m.Dir(sb.Name), "activity")); err == nil && fi.ModTime().After(sb.LastActivityAt) {
		sb.LastActivityAt = fi.ModTime().UTC()
	}
	if sb.Status != store.StatusRunning {
		// A supervisor whose starter was killed before recording it
		// is adopted: the state follows reality.
		if _, err := os.Stat(filepath.Join(m.Dir(sb.Name), "sock")); err != nil {
			return sb, nil
		}
		pid, start, ok := m.adopt(sb.Name)
		if !ok {
			return sb, nil
		}
		st, err := m.Store(ctx)
		if err != nil {
			return nil, err
		}
		name := sb.Name
		sb, err = st.Update(ctx, name, func(s *store.Sandbox) error {
			if s.Status != store.StatusRunning {
				s.Status, s.StopReason, s.SupervisorPID, s.SupervisorStart = store.StatusRunning, "", pid, start
			}
			return nil
		})
		return sb, storeErr(name, err)
	}
	if alive(sb) {
		return sb, nil
	}
	reason := fmt.Sprintf("supervisor (pid %d) exited unexpectedly", sb.SupervisorPID)
	if b, err := os.ReadFile(filepath.Join(m.Dir(sb.Name), "exit-reason")); err == nil && len(b) > 0 {
		reason = strings.TrimSpace(string(b))
	}
	st, err := m.Store(ctx)
	if err != nil {
		return nil, err
	}
	name := sb.Name
	sb, err = st.Update(ctx, name, func(s *store.Sandbox) error {
		if s.Status == store.StatusRunning && !alive(s) {
			s.Status, s.StopReason, s.SupervisorPID, s.SupervisorStart = store.StatusStopped, reason, 0, 0
		}
		return nil
	})
	return sb, storeErr(name, err)
}

// adopt finds a supervisor that runs for name although the store does
// not say so (its starter was killed between spawning it and recording
// it) and returns its pid and start time.
func (m *Manager) adopt(name string) (int, uint64, bool) {
	dir := m.Dir(name)
	c, err := agent.Dial(filepath.Join(dir, "sock"))
	if err != nil {
		return 0, 0, false
	}
	c.Close()
	b, err := os.ReadFile(filepath.Join(dir, "supervisor.pid"))
	if err != nil {
		return 0, 0, false
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscanf(string(b), "%d %d", &pid, &start); err != nil {
		return 0, 0, false
	}
	if st, err := ProcStart(pid); err != nil || st != start {
		return 0, 0, false
	}
	return pid, start, true
}

// supervisorLockFile is flock'ed by a sandbox's supervisor from before
// its boot to its end.
const supervisorLockFile = "supervisor.lock"

// netProxyFile is in a running sandbox's directory while its network is
// in proxy mode (the backend's Instance says NetworkProxied).
const netProxyFile = "net-proxy"

// bootWait bounds how long a start waits for a supervisor that still
// boots.
const bootWait = 30 * time.Second

// adoptBooting is adopt, after waiting for a supervisor that still boots
// (its starter was killed before it was ready: it holds its lock, but
// has no socket yet) to be ready or gone.
func (m *Manager) adoptBooting(name string) (int, uint64, bool) {
	lock := filepath.Join(m.Dir(name), supervisorLockFile)
	deadline := time.Now().Add(bootWait)
	for {
		if pid, start, ok := m.adopt(name); ok {
			return pid, start, true
		}
		if !locked(lock) || time.Now().After(deadline) {
			return 0, 0, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tryFlock takes an exclusive flock on path without waiting, and returns
// its release.
func tryFlock(path string) (func(), error) {
	unlock, ok, err := atomicfile.TryLock(path)
	if err == nil && !ok {
		err = errors.New("another supervisor runs this sandbox")
	}
	return unlock, err
}

// takeLock is the supervisor's lock on path: held (the starter's
// descriptor, WithLock) when it is path's file and flock'ed, else taken
// here (tryFlock).
func takeLock(path string, held *os.File) (func(), error) {
	if held == nil {
		return tryFlock(path)
	}
	var a, b unix.Stat_t
	if err := unix.Fstat(int(held.Fd()), &a); err != nil {
		held.Close()
		return nil, err
	}
	if err := unix.Lstat(path, &b); err != nil || a.Dev != b.Dev || a.Ino != b.Ino {
		held.Close()
		return nil, fmt.Errorf("the supervisor lock handed over is not %s", path)
	}
	// The starter's open file holds the lock already: this only checks
	// (an flock on the same open file never waits for itself).
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		held.Close()
		return nil, errors.New("another supervisor runs this sandbox")
	}
	return func() { held.Close() }, nil
}

// lockedGet takes the sandbox's lock and reads its state under it. It
// checks that the sandbox exists first, so that a name that does not
// exist gets no lock file.
func (m *Manager) lockedGet(ctx context.Context, name string) (*store.Store, *store.Sandbox, func(), error) {
	st, err := m.Store(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	if _, err := m.get(ctx, name); err != nil {
		return nil, nil, nil, err
	}
	unlock, err := m.lock(name)
	if err != nil {
		return nil, nil, nil, err
	}
	sb, err := m.get(ctx, name)
	if err != nil {
		unlock()
		return nil, nil, nil, err
	}
	return st, sb, unlock, nil
}

// Start starts the sandbox's supervisor (no-op when it runs).
func (m *Manager) Start(ctx context.Context, name string) (*sandbox.Info, error) {
	st, sb, unlock, err := m.lockedGet(ctx, name)
	for try := 0; err == nil && try < 3 && m.pendingFor(name); try++ {
		// A snapshot taken of it while stopped was cut short with its
		// writable layer moved but not yet stacked: finished first
		// (under the snapshots' lock, taken before the sandbox's).
		unlock()
		if err = m.finishPending(ctx); err == nil {
			st, sb, unlock, err = m.lockedGet(ctx, name)
		}
	}
	if err != nil {
		return nil, err
	}
	defer unlock()
	stopping := filepath.Join(m.Dir(name), stoppingFile)
	if sb.Status == store.StatusRunning {
		_, err := os.Lstat(stopping)
		cut := err == nil
		if c, err := agent.Dial(filepath.Join(m.Dir(name), "sock")); err == nil {
			if cut {
				// A stop whose caller was killed: its supervisor may
				// still answer while it ends the sandbox (or may not
				// have been told yet). The stop is finished, then the
				// sandbox started afresh, rather than said to run.
				_ = c.Stop(ctx)
			} else if supervisorAnswers(ctx, c) {
				c.Close()
				return m.info(sb), nil
			}
			c.Close()
		}
		// Running on record, but its supervisor no longer answers (a
		// killed one may still take a connection while it dies), or was
		// told to stop: it is let end, with what it ran (its cgroups),
		// then started afresh.
		m.awaitSupervisorEnd(sb)
		m.removeCgroups(sb)
		lock := filepath.Join(m.Dir(name), supervisorLockFile)
		for i := 0; i < 300 && locked(lock); i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := os.Remove(stopping); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err := m.thawSpec(sb); err != nil {
		return nil, err
	}
	if expired(sb, time.Now()) {
		err := m.deleteLocked(ctx, st, sb)
		m.expiredGone(sb, err)
		if err != nil {
			return nil, err
		}
		return nil, expiredError(sb)
	}
	dir := m.Dir(name)
	pid, start, ok := m.adoptBooting(name)
	if !ok {
		if err := atomicfile.WriteFile(filepath.Join(dir, "spec.json"), sb.Spec, 0o600); err != nil {
			return nil, err
		}
		if err := writeExpiry(dir, sb.ExpiresAt); err != nil {
			return nil, err
		}
		m.removeCgroups(sb)
		if pid, start, err = spawn(m.SuperviseCommand(name), filepath.Join(dir, "supervisor.log"), filepath.Join(dir, supervisorLockFile)); err != nil {
			return nil, err
		}
		if err := m.copyFiles(ctx, name); err != nil {
			stopSpawned(ctx, dir, pid, start)
			m.removeCgroups(sb)
			return nil, err
		}
	}
	sb, err = st.Update(ctx, name, func(s *store.Sandbox) error {
		now := time.Now().UTC()
		s.Status, s.StopReason, s.SupervisorPID, s.SupervisorStart, s.LastActivityAt = store.StatusRunning, "", pid, start, now
		return nil
	})
	if err != nil {
		return nil, storeErr(name, err)
	}
	return m.info(sb), nil
}

// Stop stops the sandbox (no-op when stopped).
func (m *Manager) Stop(ctx context.Context, name, reason string) (*sandbox.Info, error) {
	st, sb, unlock, err := m.lockedGet(ctx, name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// A freeze whose taker died is undone first (best effort: the stop
	// goes on, and its processes die with the sandbox once thawed).
	_ = m.thawSpec(sb)
	stopping := filepath.Join(m.Dir(name), stoppingFile)
	if sb.Status == store.StatusRunning {
		// Said before the supervisor is told: a start that comes after
		// this stop's caller was killed finishes the stop (Start)
		// instead of taking a supervisor that is ending for running.
		if err := os.WriteFile(stopping, nil, 0o600); err != nil {
			return nil, err
		}
		if c, err := agent.Dial(filepath.Join(m.Dir(name), "sock")); err == nil {
			err = c.Stop(ctx)
			c.Close()
			if err != nil {
				return nil, err
			}
		}
		m.awaitSupervisorEnd(sb)
	}
	m.removeCgroups(sb)
	sb, err = st.Update(ctx, name, func(s *store.Sandbox) error {
		s.Status, s.SupervisorPID, s.SupervisorStart = store.StatusStopped, 0, 0
		if s.StopReason == "" || reason != "" {
			s.StopReason = reason
		}
		s.LastActivityAt = time.Now().UTC()
		return nil
	})
	if err != nil {
		return nil, storeErr(name, err)
	}
	_ = os.Remove(stopping)
	return m.info(sb), nil
}

// supervisorAnswers says whether the supervisor c is connected to
// answers a ping (within 5 s). A connection alone does not say it runs
// on: a supervisor being killed still holds its listening socket, and
// takes connections, until the kernel has closed its descriptors.
func supervisorAnswers(ctx context.Context, c *agent.Client) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := c.Call(ctx, agent.Request{Op: agent.OpPing})
	return err == nil
}

// stoppingFile is in a sandbox's directory from the moment a stop is
// about to tell its supervisor to end until the stop is recorded.
const stoppingFile = "stopping"

// awaitSupervisorEnd waits up to 2 s for sb's supervisor, which was told
// to stop, to end, then makes sure with SIGKILL.
func (m *Manager) awaitSupervisorEnd(sb *store.Sandbox) {
	for i := 0; i < 200 && alive(sb); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(sb) {
		_ = unix.Kill(sb.SupervisorPID, unix.SIGKILL)
		for i := 0; i < 100 && alive(sb); i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Remove stops (with force) and deletes the sandbox and its files.
func (m *Manager) Remove(ctx context.Context, name string, force bool) error {
	st, err := m.Store(ctx)
	if err != nil {
		return err
	}
	sb, err := m.get(ctx, name)
	if err != nil {
		return err
	}
	if sb.Status == store.StatusRunning {
		if !force {
			return fmt.Errorf("%q: %w: stop it first or use --force", name, sandbox.ErrRunning)
		}
		if _, err := m.Stop(ctx, name, "removed"); err != nil {
			return err
		}
	}
	unlock, err := m.lock(name)
	if err != nil {
		return err
	}
	defer unlock()
	return m.deleteLocked(ctx, st, sb)
}

// deleteLocked deletes the stopped sandbox sb: its row, its cgroups, its
// host ids and its directory (the writable layers with it). The caller holds its
// lock.
func (m *Manager) deleteLocked(ctx context.Context, st *store.Store, sb *store.Sandbox) error {
	name := sb.Name
	if err := st.Delete(ctx, name); err != nil {
		return storeErr(name, err)
	}
	// What a supervisor killed before it could clean up left (its
	// sandbox is stopped on record, and no stop removed them).
	m.removeCgroups(sb)
	var spec sandbox.Spec
	if m.Reclaimer != nil && json.Unmarshal(sb.Spec, &spec) == nil {
		spec.Name = name
		if err := m.Reclaimer.ReleaseIDs(&spec, m.Dir(name)); err != nil {
			// Nothing is lost: gc frees it later.
			_ = err
		}
	}
	return os.RemoveAll(m.Dir(name))
}

// Dial connects to a running sandbox's supervisor. The socket is tried
// first, without the state store: only a failure opens it to say why.
func (m *Manager) Dial(ctx context.Context, name string) (*agent.Client, error) {
	if c, err := sandboxdir.Dial(m.Dir(name)); err == nil {
		return c, nil
	}
	sb, err := m.get(ctx, name)
	if err != nil {
		return nil, err
	}
	if sb.Status != store.StatusRunning {
		return nil, fmt.Errorf("%q: %w", name, ErrNotRunning)
	}
	return sandboxdir.Dial(m.Dir(name))
}

// Connect is Dial as a sandbox.Conn.
func (m *Manager) Connect(ctx context.Context, name string) (sandbox.Conn, error) {
	c, err := m.Dial(ctx, name)
	if err != nil {
		return nil, err
	}
	return agent.SandboxConn{C: c, Dir: m.Dir(name), Meter: m.Meter}, nil
}

// Spec returns the spec the sandbox runs with: spec.json in its
// directory, written at each start from the state store (no database
// open on the exec path), else the state store's copy.
func (m *Manager) Spec(ctx context.Context, name string) (*sandbox.Spec, error) {
	spec, err := sandboxdir.ReadSpec(m.Dir(name), name)
	if !errors.Is(err, fs.ErrNotExist) {
		return spec, err
	}
	sb, err := m.get(ctx, name)
	if err != nil {
		return nil, err
	}
	var s sandbox.Spec
	if err := json.Unmarshal(sb.Spec, &s); err != nil {
		return nil, fmt.Errorf("the spec of sandbox %q: %w", name, err)
	}
	return &s, nil
}

// DiskUsage is the size of the sandbox's writable layers: its root's and
// those of its copy-on-write volumes (cow<i>/).
func (m *Manager) DiskUsage(_ context.Context, name string) (int64, error) {
	return sandboxdir.WritableBytes(m.Dir(name)), nil
}

// GC removes expired sandboxes, the cgroups of stopped ones and
// directories no sandbox owns. With dryRun it only reports.
func (m *Manager) GC(ctx context.Context, dryRun bool) (sandbox.GCResult, error) {
	all, err := m.list(ctx, false)
	if err != nil {
		return sandbox.GCResult{}, err
	}
	var res sandbox.GCResult
	var removed []string
	var errs []error
	known := map[string]bool{}
	ids := map[string]string{}
	now := time.Now()
	for _, sb := range all {
		known[sb.Name] = true
		if sb.ExpiresAt != nil && now.After(*sb.ExpiresAt) {
			if !dryRun {
				err := m.Remove(ctx, sb.Name, true)
				if !errors.Is(err, sandbox.ErrSandboxNotFound) {
					m.expiredGone(&store.Sandbox{Name: sb.Name, ExpiresAt: sb.ExpiresAt}, err)
				}
				if err != nil {
					errs = append(errs, err)
					continue
				}
			}
			res.Sandboxes = append(res.Sandboxes, sb.Name)
			removed = append(removed, "sandbox "+sb.Name+" (expired)")
			continue
		}
		if sb.Status == sandbox.StatusStopped && !dryRun {
			removed = append(removed, m.removeCgroupsOf(sb.Backend, strings.ReplaceAll(sb.UUID, "-", ""))...)
		}
	}
	// Host uid ranges reserved for sandboxes that are gone (a remove
	// that was killed midway).
	listed := false
	if st, err := m.Store(ctx); err == nil {
		if rows, err := st.List(ctx); err == nil {
			listed = true
			for _, sb := range rows {
				ids[sb.Name] = SpecID(sb)
			}
		}
	}
	if listed && m.Reclaimer != nil { // never judge reservations on a list that failed
		if freed, err := m.Reclaimer.ReleaseOrphanedIDs(ids, dryRun); err != nil {
			errs = append(errs, err)
		} else {
			removed = append(removed, freed...)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(m.DataDir, "sandboxes"))
	for _, e := range ents {
		if known[e.Name()] {
			continue
		}
		dir := filepath.Join(m.DataDir, "sandboxes", e.Name())
		// A create in progress holds the directory's lock.
		if locked(filepath.Join(dir, "lock")) {
			continue
		}
		removed = append(removed, dir)
		if !dryRun {
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// Snapshot layers nothing stacks any more (snapshot_linux.go).
	layers, err := m.gcLayers(ctx, dryRun)
	res.Removed = append(removed, layers...)
	return res, errors.Join(append(errs, err)...)
}

// locked reports whether another process holds the flock of path.
func locked(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return true
	}
	return false
}

// SpecID is the backend id of a sandbox (names its cgroup).
func SpecID(sb *store.Sandbox) string {
	var spec sandbox.Spec
	if json.Unmarshal(sb.Spec, &spec) == nil && spec.ID != "" {
		return spec.ID
	}
	return strings.ReplaceAll(sb.UUID, "-", "")
}

// ProcStart is the start time of pid in clock ticks since boot.
func ProcStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	k := strings.LastIndexByte(s, ')')
	if k < 0 {
		return 0, errors.New("bad stat")
	}
	f := strings.Fields(s[k+1:])
	if len(f) < 20 {
		return 0, errors.New("bad stat")
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, errors.New("zombie")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// spawn starts argv detached (own session, stdio to logPath) and waits
// until it reports ready on fd 3.
func spawn(argv []string, logPath, lockPath string) (int, uint64, error) {
	// The supervisor's lock is taken here and handed to it (fd 4), so
	// that it is held from before the supervisor exists: a start that
	// comes while this one's supervisor is still starting up finds it
	// booting (adoptBooting) rather than no one, and does not start a
	// second one that would then fail on the lock.
	lockf, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, 0, err
	}
	defer lockf.Close()
	if err := unix.Flock(int(lockf.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return 0, 0, errors.New("another supervisor runs this sandbox")
		}
		return 0, 0, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, 0, err
	}
	defer logf.Close()
	rr, rw, err := os.Pipe()
	if err != nil {
		return 0, 0, err
	}
	defer rr.Close()
	cmd := exec.Command(argv[0])
	cmd.Args = argv[1:]
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{rw, lockf}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Env = append(os.Environ(), "AGENTKERNEL_SUPERVISOR_READY_FD=3", "AGENTKERNEL_SUPERVISOR_LOCK_FD=4")
	if err := cmd.Start(); err != nil {
		rw.Close()
		return 0, 0, fmt.Errorf("starting supervisor: %w", err)
	}
	rw.Close()
	pid := cmd.Process.Pid
	start, _ := ProcStart(pid)
	msg, _ := io.ReadAll(io.LimitReader(rr, 64<<10))
	if string(msg) != "ok" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		text := strings.TrimPrefix(string(msg), "error: ")
		if text == "" {
			text = "the supervisor exited before the sandbox was ready; see " + logPath
		}
		return 0, 0, errors.New(text)
	}
	// The supervisor outlives us; the system's init reaps it.
	_ = cmd.Process.Release()
	return pid, start, nil
}

package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/store"
)

// ErrNotRunning means the sandbox exists but is stopped.
var ErrNotRunning = errors.New("sandbox is not running")

// Manager is the lifecycle of persistent sandboxes: state in the store,
// one supervisor process per running sandbox.
type Manager struct {
	DataDir string
	Store   *store.Store
	// SuperviseCommand is the argv that runs the supervisor of name
	// (this binary's hidden `sandbox supervise` command).
	SuperviseCommand func(name string) []string
}

// Dir is the sandbox's directory.
func (m *Manager) Dir(name string) string { return filepath.Join(m.DataDir, "sandboxes", name) }

func (m *Manager) lock(name string) (func(), error) {
	dir := m.Dir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// Create records a new (stopped) sandbox.
func (m *Manager) Create(ctx context.Context, sb *store.Sandbox) error {
	if err := os.MkdirAll(filepath.Join(m.DataDir, "sandboxes"), 0o700); err != nil {
		return err
	}
	return m.Store.Create(ctx, sb)
}

// Get returns the sandbox, its status reconciled with reality.
func (m *Manager) Get(ctx context.Context, name string) (*store.Sandbox, error) {
	sb, err := m.Store.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	return m.reconcile(ctx, sb)
}

// List returns every sandbox, reconciled.
func (m *Manager) List(ctx context.Context) ([]*store.Sandbox, error) {
	all, err := m.Store.List(ctx)
	if err != nil {
		return nil, err
	}
	for i, sb := range all {
		if all[i], err = m.reconcile(ctx, sb); err != nil {
			return nil, err
		}
	}
	return all, nil
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
	// Execs are recorded by the supervisor as the mtime of "activity"
	// (no database write on the exec path).
	if fi, err := os.Stat(filepath.Join(m.Dir(sb.Name), "activity")); err == nil && fi.ModTime().After(sb.LastActivityAt) {
		sb.LastActivityAt = fi.ModTime().UTC()
	}
	if sb.Status != store.StatusRunning || alive(sb) {
		return sb, nil
	}
	reason := fmt.Sprintf("supervisor (pid %d) exited unexpectedly", sb.SupervisorPID)
	if b, err := os.ReadFile(filepath.Join(m.Dir(sb.Name), "exit-reason")); err == nil && len(b) > 0 {
		reason = strings.TrimSpace(string(b))
	}
	return m.Store.Update(ctx, sb.Name, func(s *store.Sandbox) error {
		if s.Status == store.StatusRunning && !alive(s) {
			s.Status, s.StopReason, s.SupervisorPID, s.SupervisorStart = store.StatusStopped, reason, 0, 0
		}
		return nil
	})
}

// Start starts the sandbox's supervisor (no-op when it runs).
func (m *Manager) Start(ctx context.Context, name string) (*store.Sandbox, error) {
	unlock, err := m.lock(name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	sb, err := m.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	if sb.Status == store.StatusRunning {
		return sb, nil
	}
	dir := m.Dir(name)
	if err := os.WriteFile(filepath.Join(dir, "spec.json"), sb.Spec, 0o600); err != nil {
		return nil, err
	}
	native.RemoveCgroups(SpecID(sb))
	pid, start, err := spawn(m.SuperviseCommand(name), filepath.Join(dir, "supervisor.log"))
	if err != nil {
		return nil, err
	}
	return m.Store.Update(ctx, name, func(s *store.Sandbox) error {
		now := time.Now().UTC()
		s.Status, s.StopReason, s.SupervisorPID, s.SupervisorStart, s.LastActivityAt = store.StatusRunning, "", pid, start, now
		return nil
	})
}

// Stop stops the sandbox (no-op when stopped).
func (m *Manager) Stop(ctx context.Context, name, reason string) (*store.Sandbox, error) {
	unlock, err := m.lock(name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	sb, err := m.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	if sb.Status == store.StatusRunning {
		if c, err := Dial(filepath.Join(m.Dir(name), "sock")); err == nil {
			err = c.Stop(ctx)
			c.Close()
			if err != nil {
				return nil, err
			}
		}
		// Wait for the process itself, then make sure.
		for i := 0; i < 200 && alive(sb); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if alive(sb) {
			_ = unix.Kill(sb.SupervisorPID, unix.SIGKILL)
		}
	}
	native.RemoveCgroups(SpecID(sb))
	return m.Store.Update(ctx, name, func(s *store.Sandbox) error {
		s.Status, s.SupervisorPID, s.SupervisorStart = store.StatusStopped, 0, 0
		if s.StopReason == "" || reason != "" {
			s.StopReason = reason
		}
		s.LastActivityAt = time.Now().UTC()
		return nil
	})
}

// Remove stops (with force) and deletes the sandbox and its files.
func (m *Manager) Remove(ctx context.Context, name string, force bool) error {
	sb, err := m.Get(ctx, name)
	if err != nil {
		return err
	}
	if sb.Status == store.StatusRunning {
		if !force {
			return fmt.Errorf("sandbox %q is running: stop it first or use --force", name)
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
	if err := m.Store.Delete(ctx, name); err != nil {
		return err
	}
	return os.RemoveAll(m.Dir(name))
}

// Dial connects to a running sandbox's supervisor.
func (m *Manager) Dial(ctx context.Context, name string) (*Client, error) {
	sb, err := m.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	if sb.Status != store.StatusRunning {
		return nil, fmt.Errorf("%q: %w", name, ErrNotRunning)
	}
	return Dial(filepath.Join(m.Dir(name), "sock"))
}

// Touch records activity (an exec) on the sandbox.
func (m *Manager) Touch(ctx context.Context, name string) {
	_, _ = m.Store.Update(ctx, name, func(s *store.Sandbox) error { s.LastActivityAt = time.Now().UTC(); return nil })
}

// GC removes expired sandboxes, the cgroups of stopped ones and
// directories no sandbox owns. With dryRun it only reports.
func (m *Manager) GC(ctx context.Context, dryRun bool) ([]string, error) {
	all, err := m.List(ctx)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	known := map[string]bool{}
	now := time.Now()
	for _, sb := range all {
		known[sb.Name] = true
		if sb.ExpiresAt != nil && now.After(*sb.ExpiresAt) {
			removed = append(removed, "sandbox "+sb.Name+" (expired)")
			if !dryRun {
				if err := m.Remove(ctx, sb.Name, true); err != nil {
					errs = append(errs, err)
				}
			}
			continue
		}
		if sb.Status == store.StatusStopped && !dryRun {
			for _, d := range native.RemoveCgroups(SpecID(sb)) {
				removed = append(removed, d)
			}
		}
	}
	ents, _ := os.ReadDir(filepath.Join(m.DataDir, "sandboxes"))
	for _, e := range ents {
		if known[e.Name()] {
			continue
		}
		dir := filepath.Join(m.DataDir, "sandboxes", e.Name())
		removed = append(removed, dir)
		if !dryRun {
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return removed, errors.Join(errs...)
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
func spawn(argv []string, logPath string) (int, uint64, error) {
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
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{rw}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Env = append(os.Environ(), "AGENTKERNEL_SUPERVISOR_READY_FD=3")
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

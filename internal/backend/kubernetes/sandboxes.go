package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Sandboxes are persistent sandboxes as pods, for a sandbox.Manager: its
// Store, Supervisor, Connector and HostStats. A sandbox's record (its
// sandbox.Info and Spec) is a file of this machine's data directory; the
// sandbox runs while its pod runs. Start makes the pod (and its
// NetworkPolicy) and waits until it runs, Stop and Remove delete them:
// a pod's files do not outlive it, so a stopped sandbox starts again
// from its image. Commands and file operations go through the cluster's
// exec API (conn.go). No process of this machine holds a running
// sandbox: the cluster does.
type Sandboxes struct {
	b   *Backend
	dir string
	// StartTimeout bounds the wait for a starting pod
	// (DefaultStartTimeout).
	StartTimeout time.Duration
	// MaxSandboxes > 0 caps the sandboxes recorded here ([orchestrator]
	// max_sandboxes).
	MaxSandboxes int64

	mu sync.Mutex
}

// NewSandboxes keeps the records of b's sandboxes under
// dataDir/kubernetes/<namespace>/.
func NewSandboxes(b *Backend, dataDir string) *Sandboxes {
	return &Sandboxes{b: b, dir: filepath.Join(dataDir, "kubernetes", b.Namespace())}
}

// record is a sandbox's file.
type record struct {
	Info *sandbox.Info `json:"info"`
	Spec *sandbox.Spec `json:"spec"`
}

func (s *Sandboxes) path(name string) string { return filepath.Join(s.dir, name+".json") }

func (s *Sandboxes) read(name string) (*record, error) {
	if err := ValidName(name); err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", name, sandbox.ErrSandboxNotFound)
	}
	b, err := os.ReadFile(s.path(name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("sandbox %q: %w", name, sandbox.ErrSandboxNotFound)
	}
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil || r.Info == nil || r.Spec == nil {
		return nil, fmt.Errorf("sandbox %q: its record %s cannot be read (%v)", name, s.path(name), err)
	}
	return &r, nil
}

// write replaces name's record atomically (a file of its own, renamed).
func (s *Sandboxes) write(r *record) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, ".rec-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), s.path(r.Info.Name))
}

func (s *Sandboxes) names() ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		n, ok := strings.CutSuffix(e.Name(), ".json")
		if ok && e.Type().IsRegular() && ValidName(n) == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// status fills info's Status (and StopReason) from its pod.
func (s *Sandboxes) status(ctx context.Context, info *sandbox.Info) error {
	sb, err := s.b.Get(ctx, info.Name)
	switch {
	case errors.Is(err, ErrNotFound):
		if info.Status == sandbox.StatusRunning {
			info.StopReason = "its pod is gone"
		}
		info.Status = sandbox.StatusStopped
	case err != nil:
		return err
	case sb.Phase == corev1.PodRunning && !sb.Removing:
		info.Status = sandbox.StatusRunning
		info.StopReason = ""
	default:
		if info.Status == sandbox.StatusRunning {
			info.StopReason = "its pod is " + strings.ToLower(string(sb.Phase))
		}
		info.Status = sandbox.StatusStopped
	}
	return nil
}

// Create records a new, stopped sandbox (sandbox.Store): the name must
// be a DNS label, spec must be one a pod can carry out.
func (s *Sandboxes) Create(ctx context.Context, info *sandbox.Info, spec *sandbox.Spec) error {
	if err := ValidName(info.Name); err != nil {
		return err
	}
	if _, err := RequestFor(info.Name, spec); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := os.Lstat(s.path(info.Name)); err == nil {
		return fmt.Errorf("sandbox %q: %w", info.Name, sandbox.ErrSandboxExists)
	}
	if s.MaxSandboxes > 0 {
		n, err := s.names()
		if err != nil {
			return err
		}
		if int64(len(n)) >= s.MaxSandboxes {
			return fmt.Errorf("already %d sandboxes ([orchestrator] max_sandboxes = %d): remove one first", len(n), s.MaxSandboxes)
		}
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return err
	}
	h := hex.EncodeToString(id[:])
	info.UUID = h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
	spec.ID = h
	now := time.Now().UTC()
	info.CreatedAt, info.LastActivityAt = now, now
	info.Backend = BackendName
	info.Status = sandbox.StatusStopped
	info.Network = spec.Network.Mode
	return s.write(&record{Info: info, Spec: spec})
}

// Get returns the sandbox, its status its pod's.
func (s *Sandboxes) Get(ctx context.Context, name string) (*sandbox.Info, error) {
	r, err := s.read(name)
	if err != nil {
		return nil, err
	}
	if err := s.status(ctx, r.Info); err != nil {
		return nil, err
	}
	return r.Info, nil
}

// List returns every sandbox, oldest first.
func (s *Sandboxes) List(ctx context.Context) ([]*sandbox.Info, error) {
	names, err := s.names()
	if err != nil {
		return nil, err
	}
	out := make([]*sandbox.Info, 0, len(names))
	for _, n := range names {
		i, err := s.Get(ctx, n)
		if errors.Is(err, sandbox.ErrSandboxNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, i)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// Update changes name's record.
func (s *Sandboxes) Update(ctx context.Context, name string, fn func(*sandbox.Info) error) (*sandbox.Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.read(name)
	if err != nil {
		return nil, err
	}
	if err := fn(r.Info); err != nil {
		return nil, err
	}
	if err := s.write(r); err != nil {
		return nil, err
	}
	if err := s.status(ctx, r.Info); err != nil {
		return nil, err
	}
	return r.Info, nil
}

// Remove deletes the sandbox's pod, NetworkPolicy and record; a running
// one only with force (sandbox.ErrRunning).
func (s *Sandboxes) Remove(ctx context.Context, name string, force bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.read(name)
	if err != nil {
		return err
	}
	if err := s.status(ctx, r.Info); err != nil {
		return err
	}
	if r.Info.Status == sandbox.StatusRunning && !force {
		return fmt.Errorf("sandbox %q: %w", name, sandbox.ErrRunning)
	}
	if err := s.b.Remove(ctx, name); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	if err := os.Remove(s.path(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Spec is the spec recorded at create.
func (s *Sandboxes) Spec(_ context.Context, name string) (*sandbox.Spec, error) {
	r, err := s.read(name)
	if err != nil {
		return nil, err
	}
	return r.Spec, nil
}

// Start makes the sandbox's pod and waits until it runs (sandbox.Supervisor);
// a pod that does not start is removed again and its reason returned.
func (s *Sandboxes) Start(ctx context.Context, name string) (*sandbox.Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.read(name)
	if err != nil {
		return nil, err
	}
	if err := s.status(ctx, r.Info); err != nil {
		return nil, err
	}
	if r.Info.Status == sandbox.StatusRunning {
		return r.Info, nil
	}
	if r.Info.ExpiresAt != nil && time.Now().After(*r.Info.ExpiresAt) {
		if err := s.b.Remove(ctx, name); err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		_ = os.Remove(s.path(name))
		return nil, &sandbox.ExpiredError{Name: name, At: *r.Info.ExpiresAt}
	}
	req, err := RequestFor(name, r.Spec)
	if err != nil {
		return nil, err
	}
	// A pod of this sandbox still ending (stopped a moment ago) holds
	// the name: wait for it to go.
	if err := s.b.Remove(ctx, name); err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	if _, err := s.b.Create(ctx, req); err != nil {
		return nil, err
	}
	if _, err := s.b.WaitRunning(ctx, name, startTimeout(s.StartTimeout)); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 45*time.Second)
		defer cancel()
		_ = s.b.Remove(rctx, name)
		return nil, err
	}
	r.Info.Status, r.Info.StopReason = sandbox.StatusRunning, ""
	r.Info.LastActivityAt = time.Now().UTC()
	if err := s.write(r); err != nil {
		return nil, err
	}
	return r.Info, nil
}

// Stop deletes the sandbox's pod and NetworkPolicy; the record stays.
func (s *Sandboxes) Stop(ctx context.Context, name, reason string) (*sandbox.Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.read(name)
	if err != nil {
		return nil, err
	}
	if err := s.b.Remove(ctx, name); err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	r.Info.Status, r.Info.StopReason = sandbox.StatusStopped, reason
	r.Info.LastActivityAt = time.Now().UTC()
	if err := s.write(r); err != nil {
		return nil, err
	}
	return r.Info, nil
}

// GC removes the sandboxes whose expiry has passed.
func (s *Sandboxes) GC(ctx context.Context, dryRun bool) (sandbox.GCResult, error) {
	var res sandbox.GCResult
	names, err := s.names()
	if err != nil {
		return res, err
	}
	for _, n := range names {
		r, err := s.read(n)
		if err != nil || r.Info.ExpiresAt == nil || time.Now().Before(*r.Info.ExpiresAt) {
			continue
		}
		if !dryRun {
			if err := s.Remove(ctx, n, true); err != nil {
				return res, err
			}
		}
		res.Sandboxes = append(res.Sandboxes, n)
		res.Removed = append(res.Removed, "sandbox "+n+" (expired)")
	}
	return res, nil
}

// Connect opens a connection to a running sandbox (sandbox.ErrNotRunning
// when its pod does not run).
func (s *Sandboxes) Connect(ctx context.Context, name string) (sandbox.Conn, error) {
	info, err := s.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	if info.Status != sandbox.StatusRunning {
		return nil, fmt.Errorf("sandbox %q: %w", name, sandbox.ErrNotRunning)
	}
	_, _ = s.Update(ctx, name, func(i *sandbox.Info) error { i.LastActivityAt = time.Now().UTC(); return nil })
	return &conn{b: s.b, name: name}, nil
}

// DiskUsage is 0: a pod's writable layer is on its node, out of sight.
func (s *Sandboxes) DiskUsage(context.Context, string) (int64, error) { return 0, nil }

// Host reports no totals: the machines are the cluster's nodes.
func (s *Sandboxes) Host(context.Context) (sandbox.HostUsage, error) {
	return sandbox.HostUsage{}, nil
}

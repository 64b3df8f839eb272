package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentkernel/agentkernel/internal/audit"
	"github.com/agentkernel/agentkernel/internal/config"
)

// This file is the persistent-sandbox half of the Manager: one method per
// operation a face offers (each HTTP route of the API is one call), on
// top of the mechanism's parts (Store, Supervisor, Connector, HostStats),
// with names checked, labels filtered, TTLs applied and every create,
// start, stop, remove and exec written to the audit log.

// missing is the error of an operation whose part of the mechanism is
// not wired (what names the part).
func (m *Manager) missing(what string) error {
	o := m.opts
	if o.Store == nil && o.Supervisor == nil && o.Connector == nil && o.HostStats == nil {
		return fmt.Errorf("persistent sandboxes are not available on this system: %w", ErrUnsupported)
	}
	return fmt.Errorf("persistent sandboxes: %s is not available here: %w", what, ErrUnsupported)
}

func (m *Manager) store() (Store, error) {
	if m.opts.Store == nil {
		return nil, m.missing("keeping their records")
	}
	return m.opts.Store, nil
}

func (m *Manager) supervisor() (Supervisor, error) {
	if m.opts.Supervisor == nil {
		return nil, m.missing("starting and stopping them")
	}
	return m.opts.Supervisor, nil
}

func (m *Manager) connector() (Connector, error) {
	if m.opts.Connector == nil {
		return nil, m.missing("connecting to them")
	}
	return m.opts.Connector, nil
}

// ValidateName checks a sandbox name against the rule every face shares:
// 1-63 letters, digits, '-' and '_', alphanumeric at both ends, no two
// separators in a row.
func ValidateName(name string) error { return config.ValidateSandboxName(name) }

// audit records one action; a log that cannot be written is reported
// through Warn but never fails the action itself.
func (m *Manager) audit(e audit.Entry, start time.Time, err error) {
	if m.opts.Audit == nil {
		return
	}
	e.Time = start.UTC()
	e.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	e.Who = m.opts.Who
	if err != nil {
		e.Error = err.Error()
	}
	if aerr := m.opts.Audit.Append(e); aerr != nil {
		m.opts.Warn("audit log: %v", aerr)
	}
}

// CreateRequest is what a new persistent sandbox is made of. Spec is
// resolved by the face (policy.Resolve); its root filesystem is prepared
// here when empty.
type CreateRequest struct {
	Name        string
	Spec        *Spec
	Labels      map[string]string
	Description string
	// TTL > 0 sets the expiry (removed by GC afterwards).
	TTL time.Duration
	// Start starts the sandbox once created (the API's POST /sandboxes).
	Start bool
	// Reuse returns the existing sandbox of that name instead of
	// failing with ErrSandboxExists (started when Start is set).
	Reuse bool
	// Files are copied into the sandbox at each start (the Store must
	// be a FileKeeper).
	Files []FileCopy
	// Backend is the backend to run it on ("": the Manager's default);
	// one other than the default must be a Booter.
	Backend string
}

// Create records a new sandbox (and starts it when asked: one that was
// made here and does not start is removed again). created is false when
// Reuse found an existing one, or nothing was left.
func (m *Manager) Create(ctx context.Context, req CreateRequest) (info *Info, created bool, err error) {
	st, err := m.store()
	if err != nil {
		return nil, false, err
	}
	if req.Start {
		if _, err := m.supervisor(); err != nil {
			return nil, false, err
		}
	}
	if err := ValidateName(req.Name); err != nil {
		return nil, false, err
	}
	if req.Reuse {
		if info, err := st.Get(ctx, req.Name); err == nil {
			if req.Start && info.Status != StatusRunning {
				info, err = m.Start(ctx, req.Name)
			}
			return info, false, err
		} else if !errors.Is(err, ErrSandboxNotFound) {
			return nil, false, err
		}
	}
	spec := req.Spec
	if spec == nil {
		return nil, false, errors.New("create: no spec given")
	}

	keeper, _ := st.(FileKeeper)
	if len(req.Files) > 0 && keeper == nil {
		return nil, false, fmt.Errorf("copying files into a persistent sandbox at its start is not available here: %w", ErrUnsupported)
	}
	spec.Name = req.Name
	// A persistent sandbox lives until stopped: no run timeout, no
	// terminal of its own (each exec brings one).
	spec.Resources.Timeout = 0
	spec.TTY, spec.Interactive, spec.Keep = false, false, false
	backend, err := m.persistentBackend(m.Pick(ctx, req.Backend, spec), spec)
	if err != nil {
		return nil, false, err
	}
	if m.remote(backend) == "" && len(spec.Rootfs.Layers) == 0 && !spec.Rootfs.Host {
		if err := m.PrepareRootfs(ctx, spec); err != nil {
			return nil, false, err
		}
	}
	spec.Backend = ""
	if backend != "native" {
		spec.Backend = backend
	}
	info = &Info{Name: req.Name, Image: spec.Image, ImageDigest: spec.Rootfs.Digest, RequestedImage: spec.RequestedImage, Backend: backend,
		Status: StatusStopped, Profile: spec.Profile, Resources: spec.Resources, Labels: req.Labels, Description: req.Description}
	if req.TTL > 0 {
		exp := time.Now().Add(req.TTL).UTC()
		info.ExpiresAt = &exp
	}
	start := time.Now()
	err = st.Create(ctx, info, spec)
	if !errors.Is(err, ErrSandboxExists) {
		m.audit(audit.Entry{Sandbox: req.Name, Action: audit.ActionCreate}, start, err)
	}
	if err != nil {
		if req.Reuse && errors.Is(err, ErrSandboxExists) {
			// Lost a race with another creator: take theirs.
			return m.Create(ctx, CreateRequest{Name: req.Name, Start: req.Start, Reuse: true})
		}
		return nil, false, err
	}
	if len(req.Files) > 0 {
		if err := keeper.KeepFiles(ctx, req.Name, req.Files); err != nil {
			_ = st.Remove(ctx, req.Name, true)
			return nil, false, err
		}
	}
	if req.Start {
		if info, err = m.Start(ctx, req.Name); err != nil {
			// All or nothing: the sandbox this call made and could not
			// start goes (a bad [[files]] entry, a broken image).
			if rerr := m.Remove(ctx, req.Name, true); rerr != nil && !errors.Is(rerr, ErrSandboxNotFound) {
				return nil, true, fmt.Errorf("%w (and removing the sandbox that did not start failed: %v)", err, rerr)
			}
			return nil, false, err
		}
		return info, true, nil
	}
	info, err = st.Get(ctx, req.Name)
	return info, true, err
}

// persistentBackend is the name of the backend a new persistent sandbox
// of spec runs on: name ("" the default), which must be one of the
// Manager's, able to boot persistent sandboxes (a Booter; the default is
// taken to be) and to run spec (Checker).
func (m *Manager) persistentBackend(name string, spec *Spec) (string, error) {
	def := m.opts.Default
	if def == "" {
		def = "native"
	}
	if name == "" || strings.EqualFold(name, def) {
		return def, nil
	}
	b, err := m.Backend(name)
	if err != nil {
		return "", err
	}
	if _, ok := b.(Booter); !ok {
		return "", fmt.Errorf("backend %s runs ephemeral sandboxes only so far (use -B %s for a persistent one): %w", b.Name(), def, ErrUnsupported)
	}
	if c, ok := b.(Checker); ok {
		if err := c.Check(spec); err != nil {
			return "", err
		}
	}
	return b.Name(), nil
}

// Get returns one sandbox (ErrSandboxNotFound).
func (m *Manager) Get(ctx context.Context, name string) (*Info, error) {
	st, err := m.store()
	if err != nil {
		return nil, err
	}
	return st.Get(ctx, name)
}

// ListOptions filters List.
type ListOptions struct {
	// Labels must all match (key and value).
	Labels map[string]string
	// RunningOnly leaves stopped sandboxes out.
	RunningOnly bool
}

// List returns the sandboxes matching o, oldest first.
func (m *Manager) List(ctx context.Context, o ListOptions) ([]*Info, error) {
	st, err := m.store()
	if err != nil {
		return nil, err
	}
	all, err := st.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*Info, 0, len(all))
next:
	for _, sb := range all {
		if o.RunningOnly && sb.Status != StatusRunning {
			continue
		}
		for k, v := range o.Labels {
			if got, ok := sb.Labels[k]; !ok || got != v {
				continue next
			}
		}
		out = append(out, sb)
	}
	return out, nil
}

// Patch changes a sandbox's metadata; nil fields are left alone. Labels
// replace the whole map.
type Patch struct {
	Labels      *map[string]string
	Description *string
}

// Update applies p.
func (m *Manager) Update(ctx context.Context, name string, p Patch) (*Info, error) {
	st, err := m.store()
	if err != nil {
		return nil, err
	}
	return st.Update(ctx, name, func(i *Info) error {
		if p.Labels != nil {
			i.Labels = *p.Labels
		}
		if p.Description != nil {
			i.Description = *p.Description
		}
		return nil
	})
}

// Start starts a stopped sandbox (no-op when running).
func (m *Manager) Start(ctx context.Context, name string) (*Info, error) {
	sv, err := m.supervisor()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	info, err := sv.Start(ctx, name)
	if !errors.Is(err, ErrSandboxNotFound) {
		m.audit(audit.Entry{Sandbox: name, Action: audit.ActionStart}, start, err)
	}
	return info, err
}

// Stop stops a running sandbox (no-op when stopped); its files stay.
func (m *Manager) Stop(ctx context.Context, name string) (*Info, error) {
	return m.stop(ctx, name, "stopped by user")
}

func (m *Manager) stop(ctx context.Context, name, reason string) (*Info, error) {
	sv, err := m.supervisor()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	info, err := sv.Stop(ctx, name, reason)
	if !errors.Is(err, ErrSandboxNotFound) {
		m.audit(audit.Entry{Sandbox: name, Action: audit.ActionStop}, start, err)
	}
	return info, err
}

// Restart stops and starts a sandbox.
func (m *Manager) Restart(ctx context.Context, name string) (*Info, error) {
	if _, err := m.stop(ctx, name, "restarted"); err != nil {
		return nil, err
	}
	return m.Start(ctx, name)
}

// Remove deletes a sandbox and its files; force stops a running one
// first (else ErrRunning).
func (m *Manager) Remove(ctx context.Context, name string, force bool) error {
	st, err := m.store()
	if err != nil {
		return err
	}
	start := time.Now()
	err = st.Remove(ctx, name, force)
	if !errors.Is(err, ErrSandboxNotFound) {
		m.audit(audit.Entry{Sandbox: name, Action: audit.ActionRemove}, start, err)
	}
	return err
}

// Connect opens a connection to a running sandbox for file operations
// and copies (ErrNotRunning when stopped).
func (m *Manager) Connect(ctx context.Context, name string) (Conn, error) {
	cn, err := m.connector()
	if err != nil {
		return nil, err
	}
	return cn.Connect(ctx, name)
}

// Exec runs a command in a running sandbox and returns how it ended
// (ExitCode as Run's). stdio's writers may be buffers: the API passes
// one to collect the output. A command the sandbox's rules
// ([security.commands] as they were when it was created) do not allow is
// refused with ErrCommandRefused (exit code 126) and audited as such. A
// sandbox created before the rules were recorded has none: its commands
// are not checked, and each exec says so through Warn.
func (m *Manager) Exec(ctx context.Context, name string, req ExecRequest, stdio Stdio, signals <-chan os.Signal) (Result, error) {
	if len(req.Args) == 0 {
		return Result{}, errors.New("no command given")
	}
	c, err := m.Connect(ctx, name)
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	start := time.Now()
	var res Result
	err = m.checkExec(ctx, name, req.Args)
	if err == nil {
		res, err = execBounded(ctx, c, req, stdio, signals)
	}
	e := audit.Entry{Sandbox: name, Action: audit.ActionExec, Command: req.Args, Recording: req.Recording}
	e.Details = execEndDetails(ctx, req, res, err)
	if err == nil {
		code := res.ExitCode
		e.ExitCode = &code
	} else if code := startFailureCode(err); code != 0 {
		e.ExitCode = &code
	}
	m.audit(e, start, err)
	return res, err
}

// checkExec applies the sandbox's command rules to args. Rules that
// cannot be read refuse the command: the check fails closed.
func (m *Manager) checkExec(ctx context.Context, name string, args []string) error {
	st, err := m.store()
	if err != nil {
		return fmt.Errorf("sandbox %q: cannot read its command rules, so the command is not started: %w", name, err)
	}
	spec, err := st.Spec(ctx, name)
	if err != nil {
		return fmt.Errorf("sandbox %q: cannot read its command rules, so the command is not started: %w", name, err)
	}
	if spec.Commands == nil {
		m.opts.Warn("sandbox %s was created by a version of agentkernel that did not record [security.commands] with the sandbox: its commands are not checked (recreate it to apply the rules)", name)
		return nil
	}
	err = spec.Commands.Check(args)
	var ce *CommandRefusedError
	if errors.As(err, &ce) {
		ce.Sandbox = name
	}
	return err
}

// startFailureCode is the exit code a failure to start maps to (0 when
// it is not one).
func startFailureCode(err error) int {
	switch {
	case errors.Is(err, ErrNotFound):
		return 127
	case errors.Is(err, ErrCannotInvoke):
		return 126
	}
	return 0
}

// ReadFile copies the sandbox's file at path to w.
func (m *Manager) ReadFile(ctx context.Context, name, path string, w io.Writer) (int64, error) {
	c, err := m.Connect(ctx, name)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.ReadFile(ctx, path, w)
}

// WriteFile creates or replaces the sandbox's file at path (parents
// created) with what r holds.
func (m *Manager) WriteFile(ctx context.Context, name, path string, r io.Reader, mode os.FileMode) (int64, error) {
	c, err := m.Connect(ctx, name)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.WriteFile(ctx, path, r, mode)
}

// WriteFiles writes several files (path → content) over one connection
// and returns how many it wrote; it stops at the first failure.
func (m *Manager) WriteFiles(ctx context.Context, name string, files map[string][]byte) (int, error) {
	c, err := m.Connect(ctx, name)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for i, p := range paths {
		if _, err := c.WriteFile(ctx, p, strings.NewReader(string(files[p])), 0); err != nil {
			return i, err
		}
	}
	return len(paths), nil
}

// DeleteFile removes the sandbox's file (or, with recursive, directory).
func (m *Manager) DeleteFile(ctx context.Context, name, path string, recursive bool) error {
	c, err := m.Connect(ctx, name)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Delete(ctx, path, recursive)
}

// Logs returns the audit entries of one sandbox (ErrSandboxNotFound for
// an unknown name).
func (m *Manager) Logs(ctx context.Context, name string) ([]audit.Entry, error) {
	if _, err := m.Get(ctx, name); err != nil {
		return nil, err
	}
	return m.Audit(ctx, audit.Filter{Sandbox: name})
}

// Audit returns audit entries, oldest first.
func (m *Manager) Audit(_ context.Context, f audit.Filter) ([]audit.Entry, error) {
	if m.opts.Audit == nil {
		return []audit.Entry{}, nil
	}
	return m.opts.Audit.Read(f)
}

// Extend pushes a sandbox's expiry back by d (from now when it has none
// or it has passed) and returns the sandbox.
func (m *Manager) Extend(ctx context.Context, name string, d time.Duration) (*Info, error) {
	return m.ExtendTTL(ctx, name, d, true)
}

// ExtendTTL is Extend, except that a sandbox without an expiry keeps
// none unless orSet (the CLI's extend-ttl without --by).
func (m *Manager) ExtendTTL(ctx context.Context, name string, d time.Duration, orSet bool) (*Info, error) {
	if d <= 0 {
		return nil, errors.New("the extension must be a positive duration such as 1h")
	}
	st, err := m.store()
	if err != nil {
		return nil, err
	}
	return st.Update(ctx, name, func(i *Info) error {
		if i.ExpiresAt == nil && !orSet {
			return nil
		}
		base := time.Now()
		if i.ExpiresAt != nil && i.ExpiresAt.After(base) {
			base = *i.ExpiresAt
		}
		exp := base.Add(d).UTC()
		i.ExpiresAt = &exp
		return nil
	})
}

// GC removes expired sandboxes, leftovers of dead supervisors and
// orphaned directories (dryRun: only reports them).
func (m *Manager) GC(ctx context.Context, dryRun bool) (GCResult, error) {
	sv, err := m.supervisor()
	if err != nil {
		return GCResult{}, err
	}
	return sv.GC(ctx, dryRun)
}

// Stats reports the resource use of the named sandboxes (every one when
// names is empty) and the host's totals. CPU percentages are measured
// over sample (none when 0). Figures a part of the mechanism that is not
// wired would give (connections to running sandboxes, HostStats) stay
// zero.
func (m *Manager) Stats(ctx context.Context, sample time.Duration, names ...string) ([]Usage, HostUsage, error) {
	st, err := m.store()
	if err != nil {
		return nil, HostUsage{}, err
	}
	var infos []*Info
	if len(names) == 0 {
		if infos, err = st.List(ctx); err != nil {
			return nil, HostUsage{}, err
		}
	} else {
		for _, n := range names {
			i, err := st.Get(ctx, n)
			if err != nil {
				return nil, HostUsage{}, &NameError{Name: n, Err: err}
			}
			infos = append(infos, i)
		}
	}
	// The host's sample and every sandbox's run at the same time: N
	// sandboxes take one sample period, not N.
	var host HostUsage
	var hostErr error
	var wg sync.WaitGroup
	if hs := m.opts.HostStats; hs != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			host, hostErr = hs.Host(ctx)
		}()
	}
	out := make([]Usage, len(infos))
	running := make([]bool, len(infos))
	// A name given twice is sampled once and shown twice; at most
	// statsParallel sandboxes are read at once.
	first := map[string]int{}
	slots := make(chan struct{}, statsParallel)
	for i, info := range infos {
		if _, ok := first[info.Name]; ok {
			continue
		}
		first[info.Name] = i
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			out[i], running[i] = m.usageOf(ctx, info, sample)
		}()
	}
	wg.Wait()
	for i, info := range infos {
		if j := first[info.Name]; j != i {
			out[i], running[i] = out[j], running[j]
		}
	}
	if hostErr != nil {
		return nil, HostUsage{}, hostErr
	}
	if err := ctx.Err(); err != nil {
		return nil, HostUsage{}, err
	}
	host.Sandboxes = len(infos)
	for _, r := range running {
		if r {
			host.Running++
		}
	}
	return out, host, nil
}

// statsParallel bounds how many sandboxes one Stats reads at once (each
// a connection, and a walk of its writable layers).
const statsParallel = 64

// usageOf is Stats's figures of one sandbox: a running one's from its
// connection, CPU percent over its own two readings, sample apart by its
// own timer (none when sample is 0), and its writable layers' size from the host
// (HostStats), as a stopped one's. running says its connection answered.
func (m *Manager) usageOf(ctx context.Context, info *Info, sample time.Duration) (u Usage, running bool) {
	u = Usage{Name: info.Name, Status: info.Status}
	defer func() {
		if hs := m.opts.HostStats; hs != nil && u.UpperBytes == 0 {
			// A running sandbox's agent does not measure its writable
			// layers: the host does, as for a stopped one.
			u.UpperBytes, _ = hs.DiskUsage(ctx, info.Name)
		}
	}()
	cn := m.opts.Connector
	if info.Status != StatusRunning || cn == nil {
		return u, false
	}
	c, err := cn.Connect(ctx, info.Name)
	if err != nil {
		return u, false
	}
	defer c.Close()
	first, err := c.Usage(ctx)
	if err != nil {
		return u, true
	}
	first.Name, first.Status = info.Name, info.Status
	u = first
	if sample <= 0 {
		return u, true
	}
	t := time.NewTimer(sample)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return u, true
	}
	if next, err := c.Usage(ctx); err == nil {
		u.CPUPercent = 100 * (next.CPUSeconds - first.CPUSeconds) / sample.Seconds()
		u.CPUSeconds, u.MemoryBytes, u.Pids = next.CPUSeconds, next.MemoryBytes, next.Pids
	}
	return u, true
}

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/internal/audit"
	image "github.com/agentkernel/agentkernel/internal/image/cache"
)

// Images is the part of the image store the Manager needs.
type Images interface {
	// Ensure returns the root filesystem of ref, pulling it according to
	// pull ("missing", "always", "never").
	Ensure(ctx context.Context, ref, pull string) (image.Rootfs, error)
	// Unreachable reports whether err means the registry could not be
	// reached while the image was not cached.
	Unreachable(err error) bool
	// Host returns the root filesystem of the special "host" image.
	Host() image.Rootfs
}

// ManagerOptions configures a Manager.
type ManagerOptions struct {
	Images   Images
	Backends []Backend
	// Default is the backend used when none is named ("native").
	Default string
	// Warn prints one line for the user (e.g. the host fallback notice).
	Warn func(format string, args ...any)

	// The mechanism under persistent sandboxes (persistent.go), each
	// part nil where it is not available: the methods that need it
	// then fail with ErrUnsupported. supervisor.Manager implements all
	// four.
	Store      Store
	Supervisor Supervisor
	Connector  Connector
	HostStats  HostStats
	// Audit, when set, records every create, start, stop, remove and
	// exec; Who names the caller in its entries ("uid=0(root) via cli").
	Audit *audit.Log
	Who   string

	// PickAuto is the ladder behind the backend name "auto": the
	// strongest of the Manager's backends that works here for spec, and
	// why. Nil: "auto" is the default backend.
	PickAuto func(ctx context.Context, spec *Spec) (backend, why string)
	// Info prints a line shown at --log-level info (auto's choice).
	Info func(format string, args ...any)
}

// AutoBackend is the backend name that asks the Manager to pick the
// strongest backend that works for each sandbox (ManagerOptions.PickAuto).
const AutoBackend = "auto"

// Manager is the one service the faces call. It picks the backend,
// prepares the root filesystem and runs ephemeral sandboxes (Run), and it
// owns the persistent ones (lifecycle.go): each operation a face offers is
// one Manager method.
type Manager struct {
	opts     ManagerOptions
	backends map[string]Backend
}

// plannedBackends are names users may know from other runtimes; asking for
// one gives a clear "not built yet" rather than "unknown".
var plannedBackends = []string{"microvm", "firecracker", "nomad"}

// NewManager returns a Manager over the given backends.
func NewManager(opts ManagerOptions) *Manager {
	m := &Manager{opts: opts, backends: make(map[string]Backend, len(opts.Backends))}
	for _, b := range opts.Backends {
		m.backends[b.Name()] = b
	}
	if m.opts.Warn == nil {
		m.opts.Warn = func(string, ...any) {}
	}
	if m.opts.Info == nil {
		m.opts.Info = func(string, ...any) {}
	}
	return m
}

// Known checks a backend name a request gives ("" for the default):
// one of the Manager's backends, or "auto".
func (m *Manager) Known(name string) error {
	if strings.EqualFold(strings.TrimSpace(name), AutoBackend) {
		return nil
	}
	_, err := m.Backend(name)
	return err
}

// Pick resolves the backend name "auto" for spec to the backend the
// ladder picks (and says which, and why, at info level); other names come
// back unchanged.
func (m *Manager) Pick(ctx context.Context, name string, spec *Spec) string {
	if !strings.EqualFold(strings.TrimSpace(name), AutoBackend) {
		return name
	}
	def := m.opts.Default
	if def == "" {
		def = "native"
	}
	if m.opts.PickAuto == nil {
		return def
	}
	b, why := m.opts.PickAuto(ctx, spec)
	if _, err := m.Backend(b); err != nil {
		return def
	}
	m.opts.Info("agentkernel: backend auto: %s (%s)", b, why)
	return b
}

// Backend returns the backend called name ("" for the default).
func (m *Manager) Backend(name string) (Backend, error) {
	if name == "" {
		name = m.opts.Default
	}
	if b, ok := m.backends[strings.ToLower(name)]; ok {
		return b, nil
	}
	if strings.EqualFold(name, "kubernetes") || strings.EqualFold(name, "k8s") {
		return nil, fmt.Errorf("backend kubernetes is served by agentkernel-kube: name it on the command line (run -B kubernetes, sandbox create -B kubernetes, ...), or serve the HTTP API with it ([sandbox] backend = \"kubernetes\"); available here: %s: %w", m.backendNames(), ErrUnsupported)
	}
	for _, p := range plannedBackends {
		if strings.EqualFold(p, name) {
			return nil, fmt.Errorf("backend %q is not built yet; available: %s: %w", name, m.backendNames(), ErrUnsupported)
		}
	}
	return nil, fmt.Errorf("unknown backend %q; available: %s", name, m.backendNames())
}

func (m *Manager) backendNames() string {
	names := make([]string, 0, len(m.backends))
	for n := range m.backends {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// PrepareRootfs fills spec.Rootfs from the image store. An image chosen by
// auto-detection that is not cached while its registry cannot be reached
// falls back to the host image with one warning, and the spec records it
// (Image "host", RequestedImage the one asked for); an image the user
// named never falls back.
func (m *Manager) PrepareRootfs(ctx context.Context, spec *Spec) error {
	if m.opts.Images == nil {
		return errors.New("no image store configured")
	}
	rootfs, err := m.opts.Images.Ensure(ctx, spec.Image, spec.Pull)
	if err != nil {
		if m.opts.Images.Unreachable(err) && autoDetected(spec.ImageRule) {
			m.opts.Warn("%s is not cached and its registry cannot be reached; running with the host's own tools (read-only) instead", spec.Image)
			spec.Rootfs = m.opts.Images.Host()
			spec.Image, spec.RequestedImage = image.HostRef, spec.Image
			return nil
		}
		return err
	}
	spec.Rootfs = rootfs
	return nil
}

// autoDetected reports whether the image was picked by detection rather
// than named by the user (flag or config).
func autoDetected(rule string) bool {
	switch rule {
	case "flag", "config":
		return false
	}
	return true
}

// Run prepares the root filesystem if needed and runs spec to completion
// on the named backend. A command spec.Commands does not allow is refused
// (ErrCommandRefused) before anything is prepared.
func (m *Manager) Run(ctx context.Context, backend string, spec *Spec, stdio Stdio) (Result, error) {
	if err := spec.Commands.Check(spec.Args); err != nil {
		return Result{}, err
	}
	b, err := m.Backend(m.Pick(ctx, backend, spec))
	if err != nil {
		return Result{}, err
	}
	if c, ok := b.(Checker); ok {
		if err := c.Check(spec); err != nil {
			return Result{}, err
		}
	}
	if _, remote := b.(Remote); !remote && len(spec.Rootfs.Layers) == 0 && !spec.Rootfs.Host {
		forget := func() {}
		if a, ok := b.(Anticipator); ok {
			forget = a.Anticipate(spec)
		}
		if err := m.PrepareRootfs(ctx, spec); err != nil {
			forget()
			return Result{}, err
		}
	}
	start := time.Now()
	res, err := b.Run(ctx, spec, stdio)
	m.AuditDenials(spec, res.NetworkDenials, start)
	m.AuditInjections(spec, res.SecretInjections, start)
	return res, err
}

// AuditDenials records what a run's network policy refused, one entry
// per distinct refusal (Run does it for its runs; a Prepared's runner
// does it for its).
func (m *Manager) AuditDenials(spec *Spec, ds []NetworkDenial, start time.Time) {
	name := spec.Name
	if name == "" {
		name = "ephemeral"
	}
	for _, d := range ds {
		what := d.Name
		if d.Addr != "" {
			what = strings.TrimSpace(what + " " + d.Addr)
		}
		m.audit(audit.Entry{Sandbox: name, Action: audit.ActionNetworkDeny, Command: spec.Args,
			Details: fmt.Sprintf("%s %s: %s (%d×)", d.Kind, what, d.Reason, max(d.Count, 1))}, start, nil)
	}
}

// Prepare builds a sandbox for spec on the named backend up to the start
// of its command (warm pools); ErrUnsupported when the backend cannot.
// The prepared sandbox's Run refuses (and discards the sandbox for) a
// command that spec.Commands does not allow.
func (m *Manager) Prepare(ctx context.Context, backend string, spec *Spec) (Prepared, error) {
	b, err := m.Backend(m.Pick(ctx, backend, spec))
	if err != nil {
		return nil, err
	}
	pb, ok := b.(Preparer)
	if !ok {
		return nil, fmt.Errorf("backend %s cannot prepare sandboxes ahead: %w", b.Name(), ErrUnsupported)
	}
	// A Remote backend's nodes fetch the image themselves.
	if _, remote := b.(Remote); !remote && len(spec.Rootfs.Layers) == 0 && !spec.Rootfs.Host {
		if err := m.PrepareRootfs(ctx, spec); err != nil {
			return nil, err
		}
	}
	p, err := pb.Prepare(ctx, spec)
	if err != nil || spec.Commands == nil {
		return p, err
	}
	return checkedPrepared{Prepared: p, rules: spec.Commands}, nil
}

// remote says what name's sandboxes are when its backend is Remote
// ("" otherwise, and for a name the Manager does not know).
func (m *Manager) remote(name string) string {
	if name == "" {
		return ""
	}
	b, ok := m.backends[strings.ToLower(name)]
	if !ok {
		return ""
	}
	if r, ok := b.(Remote); ok {
		return r.Remote()
	}
	return ""
}

// Drain waits until the sandboxes of finished runs are completely torn
// down (a backend may finish that after Run returns).
func (m *Manager) Drain() {
	for _, b := range m.backends {
		if d, ok := b.(interface{ Drain() }); ok {
			d.Drain()
		}
	}
}

package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/internal/image/cache"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// What lets a sandbox.Manager (and so `serve`, the HTTP API and MCP)
// run its sandboxes as pods: RunBackend is the sandbox.Backend of
// ephemeral runs (a pod for one command), Sandboxes (sandboxes.go) the
// Store, Supervisor and Connector of persistent ones, ClusterImages the
// Images of a Manager whose images the cluster pulls.

// BackendName is the backend's name as users type it.
const BackendName = "kubernetes"

// DefaultStartTimeout is how long a sandbox's pod may take to run.
const DefaultStartTimeout = 2 * time.Minute

// RunBackend runs a sandbox.Spec's command in a pod made for it: its
// NetworkPolicy and pod created, the pod waited for until it runs, the
// command exec'd in it through the cluster's exec API, both removed
// afterwards, also when the run is interrupted.
type RunBackend struct {
	B *Backend
	// StartTimeout bounds the wait for the pod (DefaultStartTimeout).
	StartTimeout time.Duration
}

// Name is "kubernetes".
func (r *RunBackend) Name() string { return BackendName }

// Check refuses a spec a pod cannot carry out (sandbox.Checker), before
// anything is made.
func (r *RunBackend) Check(spec *sandbox.Spec) error {
	if spec.Keep {
		return fmt.Errorf("keeping a run's writable layer: %w on the kubernetes backend (the pod's files go with it; use a persistent sandbox)", sandbox.ErrUnsupported)
	}
	req, err := RequestFor("check", spec)
	if err != nil {
		return err
	}
	if r.B == nil {
		return nil
	}
	return r.B.check(req)
}

// Run runs spec.Args in a new pod and removes it.
func (r *RunBackend) Run(ctx context.Context, spec *sandbox.Spec, stdio sandbox.Stdio) (sandbox.Result, error) {
	if err := r.Check(spec); err != nil {
		return sandbox.Result{}, err
	}
	if len(spec.Args) == 0 {
		return sandbox.Result{}, errors.New("no command given")
	}
	name, err := runName()
	if err != nil {
		return sandbox.Result{}, err
	}
	req, err := RequestFor(name, spec)
	if err != nil {
		return sandbox.Result{}, err
	}
	// A run whose removal never happens (this process killed) is reaped
	// after a day.
	req.TTL = 24 * time.Hour
	if _, err := r.B.Create(ctx, req); err != nil {
		return sandbox.Result{}, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 45*time.Second)
		defer cancel()
		_ = r.B.Remove(rctx, name)
	}()
	if _, err := r.B.WaitRunning(ctx, name, startTimeout(r.StartTimeout)); err != nil {
		return sandbox.Result{}, err
	}
	ectx := ctx
	if spec.Resources.Timeout > 0 {
		var cancel context.CancelFunc
		ectx, cancel = context.WithTimeout(ctx, spec.Resources.Timeout)
		defer cancel()
	}
	eio := ExecIO{Stdout: stdio.Stdout, Stderr: stdio.Stderr, TTY: spec.TTY}
	if spec.Interactive || spec.TTY {
		eio.Stdin = stdio.Stdin
	}
	code, err := r.B.Exec(ectx, name, spec.Args, eio)
	if err != nil {
		if spec.Resources.Timeout > 0 && errors.Is(ectx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			return sandbox.Result{ExitCode: 124, TimedOut: true}, nil
		}
		return sandbox.Result{}, execError(err)
	}
	return resultOf(code), nil
}

// resultOf is the Result of an exit status the cluster reported (128+N
// for a command killed by signal N, as the runtime reports it).
func resultOf(code int) sandbox.Result {
	res := sandbox.Result{ExitCode: code}
	if code > 128 && code < 160 {
		res.Signal = code - 128
	}
	return res
}

// execError maps an exec that could not start its command to the
// errors the faces turn into 127 and 126 (the runtime's words are all
// the exec API gives).
func execError(err error) error {
	s := err.Error()
	switch {
	case strings.Contains(s, "executable file not found"), strings.Contains(s, "no such file or directory"):
		return fmt.Errorf("%w: %v", sandbox.ErrNotFound, err)
	case strings.Contains(s, "permission denied"):
		return fmt.Errorf("%w: %v", sandbox.ErrCannotInvoke, err)
	}
	return err
}

func startTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultStartTimeout
	}
	return d
}

// runName is a fresh name for a run's sandbox: run-<10 hex digits>.
func runName() (string, error) {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "run-" + hex.EncodeToString(b[:]), nil
}

// RequestFor is the pod request for spec under name, or why a pod
// cannot be what spec asks for: published ports, UDP allow-list
// entries, this machine's directories (only the profile's /workspace,
// which becomes an empty directory of the pod), secrets injected by an
// egress proxy, SSH access, host-image runs. A domain allow- or
// block-list becomes NetworkProxy.
func RequestFor(name string, spec *sandbox.Spec) (*Request, error) {
	unsupported := func(what string) error {
		return fmt.Errorf("%s: %w on the kubernetes backend (docs/kubernetes.md)", what, sandbox.ErrUnsupported)
	}
	if spec.Image == "" || spec.Image == cache.HostRef || spec.Rootfs.Host {
		return nil, unsupported("running this machine's own tools (image \"host\")")
	}
	p, err := LookupProfile(spec.Profile)
	if err != nil {
		return nil, err
	}
	r := &Request{Name: name, Image: spec.Image, Profile: p, MemoryMB: spec.Resources.MemoryMB, CPUPercent: spec.Resources.CPUPercent}
	n := spec.Network
	switch {
	case len(n.Ports) > 0:
		return nil, unsupported("published ports")
	case len(n.AllowUDP) > 0:
		return nil, unsupported("UDP allow-list entries")
	}
	switch n.Mode {
	case sandbox.NetworkNone:
		r.Network = NetworkNone
	case sandbox.NetworkFull:
		r.Network = NetworkFull
		if len(n.BlockDomains) > 0 {
			// Names to refuse: through the pod's egress proxy.
			r.Network, r.BlockDomains = NetworkProxy, append([]string(nil), n.BlockDomains...)
		}
	case sandbox.NetworkFiltered:
		switch {
		case len(n.AllowDomains) > 0:
			r.Network = NetworkProxy
			r.AllowDomains = append([]string(nil), n.AllowDomains...)
			r.BlockDomains = append([]string(nil), n.BlockDomains...)
			r.AllowCIDRs = append([]string(nil), n.AllowCIDRs...)
		case len(n.AllowCIDRs) == 0:
			r.Network = NetworkNone
		default:
			r.Network, r.AllowCIDRs = NetworkCIDRs, append([]string(nil), n.AllowCIDRs...)
		}
	case "":
	default:
		return nil, fmt.Errorf("network mode %q: %w on the kubernetes backend", n.Mode, sandbox.ErrUnsupported)
	}
	if spec.Secrets != nil || (spec.SecretBindings != nil && len(spec.SecretBindings.Bindings) > 0) {
		return nil, unsupported("secrets injected into requests (-S)")
	}
	if spec.SSH != nil {
		return nil, unsupported("SSH access")
	}
	for _, m := range spec.Mounts {
		switch {
		case m.Dest == "/workspace" && (m.Kind == sandbox.MountBind || m.Kind == sandbox.MountCopyOnWrite):
			// The project directory is this machine's: the pod gets an
			// empty /workspace of its own.
			r.Workspace = true
		case m.Kind == sandbox.MountTmpfs && m.Dest == "/tmp":
		default:
			return nil, unsupported(fmt.Sprintf("mounting %s at %s (a pod cannot see this machine's files)", orDash(m.Source), m.Dest))
		}
	}
	if spec.Workdir != "" && (r.Workspace || !strings.HasPrefix(spec.Workdir+"/", "/workspace/")) {
		r.Workdir = spec.Workdir
	}
	for _, e := range spec.Env {
		if k, _, ok := strings.Cut(e, "="); ok && k != "" {
			r.Env = append(r.Env, e)
		}
	}
	if err := r.Check(); err != nil {
		return nil, err
	}
	return r, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ClusterImages is the sandbox.Images of a Manager whose sandboxes are
// pods: the cluster's nodes pull each image themselves, so nothing is
// pulled or unpacked here; the reference goes to the pod as it is.
type ClusterImages struct{}

// Ensure returns a root filesystem that only names ref.
func (ClusterImages) Ensure(_ context.Context, ref, _ string) (cache.Rootfs, error) {
	if err := checkImage(ref); err != nil {
		return cache.Rootfs{}, err
	}
	return cache.Rootfs{Ref: ref}, nil
}

// Unreachable is false: no registry is reached from here.
func (ClusterImages) Unreachable(error) bool { return false }

// Host is the empty root filesystem: pods cannot run this machine's
// tools (RequestFor refuses it).
func (ClusterImages) Host() cache.Rootfs { return cache.Rootfs{} }

// What the Manager asks of the adapters.
var (
	_ sandbox.Backend    = (*RunBackend)(nil)
	_ sandbox.Checker    = (*RunBackend)(nil)
	_ sandbox.Store      = (*Sandboxes)(nil)
	_ sandbox.Supervisor = (*Sandboxes)(nil)
	_ sandbox.Connector  = (*Sandboxes)(nil)
	_ sandbox.HostStats  = (*Sandboxes)(nil)
	_ sandbox.Images     = ClusterImages{}
)

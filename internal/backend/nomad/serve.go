package nomad

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/agentkernel/agentkernel/internal/envblock"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Sandboxes is the nomad backend as agentkernel-full's sandbox.Manager
// holds it (the HTTP API of `serve`, and `sandbox create` beside it): a
// sandbox.Backend whose Run is an ephemeral job (created, its command
// run through the exec API once the sandbox answers, purged), and, on
// Linux, a sandbox.Booter whose Instance is a job started and ready,
// held by the sandbox's supervisor on this host, its commands and files
// going through the exec API to the node's agentkernel, ended by
// purging the job (boot_linux.go). It is a sandbox.Remote: the nodes
// pull the images, and nothing of a sandbox's files is on this host.
type Sandboxes struct {
	load func() (ServeOptions, error)
	once sync.Once
	b    *Backend
	err  error
	// startTimeout is how long a job may take to answer.
	startTimeout time.Duration
	// pools is this process's warm pools (serve_pool.go).
	pools poolState
}

// ServeOptions configure Sandboxes.
type ServeOptions struct {
	Options
	// StartTimeout is how long a sandbox's job may take until its
	// sandbox answers (0: 2 minutes; the node may pull the image).
	StartTimeout time.Duration
}

// NewSandboxes makes the backend over the options load returns, called
// once, when a sandbox is first checked, run or booted (so that a
// command that never uses the backend never reads its configuration);
// it sends no request itself. The options are checked as New checks
// them, and a failure is every later call's error.
func NewSandboxes(load func() (ServeOptions, error)) *Sandboxes {
	return &Sandboxes{load: load}
}

// backend is the job client, made on first use.
func (s *Sandboxes) backend() (*Backend, error) {
	s.once.Do(func() {
		o, err := s.load()
		if err != nil {
			s.err = fmt.Errorf("backend nomad: %w", err)
			return
		}
		if o.StartTimeout <= 0 {
			o.StartTimeout = 2 * time.Minute
		}
		s.startTimeout = o.StartTimeout
		if s.b, err = New(o.Options); err != nil {
			s.err = fmt.Errorf("backend nomad: %w", err)
		}
	})
	return s.b, s.err
}

// Name is "nomad".
func (s *Sandboxes) Name() string { return "nomad" }

// Remote says what the sandboxes are (sandbox.Remote).
func (s *Sandboxes) Remote() string { return "a Nomad job" }

var (
	_ sandbox.Backend = (*Sandboxes)(nil)
	_ sandbox.Checker = (*Sandboxes)(nil)
	_ sandbox.Remote  = (*Sandboxes)(nil)
)

// unsupported words what a job cannot do, as sandbox.ErrUnsupported.
func unsupported(format string, args ...any) error {
	return fmt.Errorf("backend nomad: "+format+": %w", append(args, sandbox.ErrUnsupported)...)
}

// Check refuses, before anything is sent, a spec a job cannot carry the
// way the native backend would run it (sandbox.Checker): what the node's
// `agentkernel sandbox create` has no flag for is refused, never
// dropped.
func (s *Sandboxes) Check(spec *sandbox.Spec) error {
	b, err := s.backend()
	if err != nil {
		return err
	}
	if b.opts.Driver != DriverAgentkernel {
		return unsupported("the HTTP API needs the agentkernel driver (the node's agentkernel, [orchestrator] nomad_driver = \"raw_exec\"); the %s driver runs the node's own files", b.opts.Driver)
	}
	if spec.Name != "" {
		if err := ValidName(spec.Name); err != nil {
			return err
		}
	}
	n := spec.Network
	switch {
	case len(n.Ports) > 0:
		return unsupported("published ports are not available: a job's sandbox has no port on this host")
	case len(n.BlockDomains) > 0 || len(n.AllowCIDRs) > 0 || len(n.AllowUDP) > 0 || n.AllowlistOnly:
		return unsupported("the network policy is none, filtered with allowed domains, or full: blocked domains, CIDRs and UDP rules cannot be handed to the node")
	case spec.SSH != nil:
		return unsupported("SSH is served by a supervisor on the sandbox's host; a job's sandbox has none here")
	case spec.SecretBindings != nil && len(spec.SecretBindings.Bindings) > 0 || spec.Secrets != nil && (len(spec.Secrets.Bindings) > 0 || len(spec.Secrets.Files) > 0):
		return unsupported("secrets stay in this host's vault: the node's sandbox cannot get them")
	}
	for _, m := range spec.Mounts {
		// A tmpfs is the sandbox's own (the node's profile makes the
		// same); the project's /workspace is the node's agentkernel's.
		if m.Kind != sandbox.MountTmpfs && m.Dest != "/workspace" {
			return unsupported("volume %s: this host's directories are not on the node (only the project's /workspace is left to the node's agentkernel)", m.Dest)
		}
	}
	r := s.request(spec, "check-name")
	return r.Check(b.opts.Driver)
}

// request is the job for spec named name.
func (s *Sandboxes) request(spec *sandbox.Spec, name string) *Request {
	r := &Request{Name: name, Image: spec.Image, Profile: spec.Profile, MemoryMB: int(spec.Resources.MemoryMB), Owner: spec.ID}
	if spec.Image == "" {
		r.Image = ""
	}
	switch spec.Network.Mode {
	case sandbox.NetworkNone:
		r.Network = NetworkNone
	case sandbox.NetworkFiltered:
		r.Network, r.AllowDomains = NetworkFiltered, spec.Network.AllowDomains
	case sandbox.NetworkFull:
		r.Network = NetworkFull
	}
	return r
}

// execArgs is the node's `agentkernel exec` of args in name, with the
// directory and user, for a command without an environment of its own
// (execWithEnv gives it one).
func execArgs(name string, args, env []string, workdir, user string, tty bool) ([]string, error) {
	if len(env) > 0 {
		return nil, errors.New("execArgs: an environment goes through execWithEnv")
	}
	x, err := execWithEnv(name, args, nil, workdir, user, tty)
	return x.args, err
}

// nodeExec is a command for the node's `agentkernel exec`: its
// arguments, and its environment as an envblock block for its stdin
// (nil for none).
type nodeExec struct {
	args  []string
	block []byte
	tty   bool
}

// execWithEnv is the node's `agentkernel exec` of args in name, with the
// request's environment, directory and user. The environment never goes
// on the command line, which every user of the node can read
// (/proc/PID/cmdline): it is sent on stdin before the command's own
// (--env-stdin, runNode). An entry without "=" would pass the node's own
// value of that variable: refused, as is one with a NUL.
func execWithEnv(name string, args, env []string, workdir, user string, tty bool) (nodeExec, error) {
	x := nodeExec{args: []string{"exec", "-i"}, tty: tty}
	if tty {
		x.args = append(x.args, "-t")
	}
	if len(env) > 0 {
		b, err := envblock.Encode(env)
		if err != nil {
			return nodeExec{}, err
		}
		x.block = b
		x.args = append(x.args, "--env-stdin")
	}
	if workdir != "" {
		x.args = append(x.args, "-w", workdir)
	}
	if user != "" {
		x.args = append(x.args, "-u", user)
	}
	x.args = append(append(x.args, name, "--"), args...)
	return x, nil
}

// runNode runs x through the exec API in alloc's task: its block first
// on stdin, then stdin. With a terminal the node's agentkernel answers
// envblock.Ready once its terminal is raw, and the block waits for it
// (a cooked terminal would echo it into the output).
func (b *Backend) runNode(ctx context.Context, alloc *api.Allocation, name string, x nodeExec, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	cmd := b.nodeCommand(x.args...)
	switch {
	case x.block == nil:
		return b.execIn(ctx, alloc, name, cmd, x.tty, stdin, stdout, stderr)
	case !x.tty:
		in := io.Reader(bytes.NewReader(x.block))
		if stdin != nil {
			in = io.MultiReader(in, stdin)
		}
		return b.execIn(ctx, alloc, name, cmd, false, in, stdout, stderr)
	}
	if stdout == nil {
		stdout = io.Discard
	}
	f := envblock.NewFilter(stdout, x.block, stdin)
	defer f.Close()
	return b.execIn(ctx, alloc, name, cmd, true, f.Stdin(), f.Writer(), stderr)
}

// runName is a fresh name for a run's job.
func runName() (string, error) {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "run-" + hex.EncodeToString(b[:]), nil
}

// Run runs spec.Args in a job of its own and purges it after, also when
// ctx ends (sandbox.Backend). The job's sandbox is made by the node's
// agentkernel with spec's image, profile, network and memory; the
// command gets spec's environment, directory and user.
func (s *Sandboxes) Run(ctx context.Context, spec *sandbox.Spec, stdio sandbox.Stdio) (sandbox.Result, error) {
	if len(spec.Args) == 0 {
		return sandbox.Result{}, errors.New("backend nomad: a command is required")
	}
	if err := s.Check(spec); err != nil {
		return sandbox.Result{}, err
	}
	b, _ := s.backend()
	name, err := runName()
	if err != nil {
		return sandbox.Result{}, err
	}
	r := s.request(spec, name)
	// A run whose purge never happened is reaped after a day.
	r.TTL = 24 * time.Hour
	x, err := execWithEnv(name, spec.Args, spec.Env, spec.Workdir, spec.User, spec.TTY)
	if err != nil {
		return sandbox.Result{}, err
	}
	if _, err := b.Create(ctx, r); err != nil {
		return sandbox.Result{}, err
	}
	defer purge(b, name)
	alloc, err := b.Ready(ctx, name, s.startTimeout)
	if err != nil {
		return sandbox.Result{}, err
	}
	runCtx := ctx
	if spec.Resources.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, spec.Resources.Timeout)
		defer cancel()
	}
	var stdin io.Reader
	if spec.Interactive || spec.TTY {
		stdin = stdio.Stdin
	}
	code, err := b.runNode(runCtx, alloc, name, x, stdin, stdio.Stdout, stdio.Stderr)
	if err != nil {
		if ctx.Err() == nil && runCtx.Err() != nil {
			return sandbox.Result{ExitCode: 124, TimedOut: true}, nil
		}
		return sandbox.Result{}, err
	}
	return resultOf(code), nil
}

// resultOf is an exit status as a Result: 128+N is signal N's.
func resultOf(code int) sandbox.Result {
	res := sandbox.Result{ExitCode: code}
	if code > 128 && code < 128+65 {
		res.Signal = code - 128
	}
	return res
}

// purge removes name's job, with a time of its own (ctx may have ended).
func purge(b *Backend, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = b.Remove(ctx, name)
}

// Probe asks the Nomad agent for its leader and the nodes that can run
// the sandboxes' tasks (raw_exec healthy), and says so in one line; an
// error when the agent does not answer or no node can.
func (s *Sandboxes) Probe(ctx context.Context) (string, error) {
	b, err := s.backend()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	leader, err := b.client.Status().Leader()
	if err != nil {
		return "", b.apiError("ask the Nomad agent for its leader", err)
	}
	nodes, _, err := b.client.Nodes().List(b.q(ctx))
	if err != nil {
		return "", b.apiError("list the Nomad nodes", err)
	}
	driver := "raw_exec"
	if b.opts.Driver == DriverExec {
		driver = "exec"
	}
	ready := 0
	for _, n := range nodes {
		if n.Status != "ready" {
			continue
		}
		if d, ok := n.Drivers[driver]; ok && d.Detected && d.Healthy {
			ready++
		}
	}
	if ready == 0 {
		return "", fmt.Errorf("backend nomad: no ready node of the Nomad cluster at %s has the %s driver healthy (enable it in the clients' plugin \"raw_exec\" block)", b.client.Address(), driver)
	}
	return fmt.Sprintf("Nomad at %s (leader %s), %d ready node(s) with %s, namespace %s", b.client.Address(), leader, ready, driver, b.opts.Namespace), nil
}

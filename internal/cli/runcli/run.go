package runcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentkernel/agentkernel/internal/audit"
	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/backend/native/prestart"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/detect"
	image "github.com/agentkernel/agentkernel/internal/image/cache"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// RunLong is run's --help text.
const RunLong = `Run a command in a fresh sandbox and remove the sandbox afterwards.

The image is picked from the command (python3 → python:3.12-alpine, node →
node:22-alpine, go → golang:1.23-alpine, …), else from the project files in
the current directory, else alpine:3.20; --image or agentkernel.toml override
that ('agentkernel detect' shows the choice). An auto-detected image that is
not cached while its registry cannot be reached falls back to the host's own
tools, read-only, with a warning; an image you name never falls back. Such a
sandbox is recorded as image host ('sandbox list' shows "host (fallback for
IMAGE)"); 'detect' and --dry-run say beforehand when the image is not cached.
In the host image (--image host, or the fallback) PATH holds the host's bin
directories that the image shows (/usr/local/go/bin among them when the host
has it) and HOME is an empty directory of the sandbox's own, writable.

The security profile decides what the sandbox sees (see 'agentkernel
profiles'): moderate (default) shows the current directory at /workspace
copy-on-write and runs the command there, permissive binds it read-write,
restrictive hides it and makes the root read-only (its command runs in the
image's working directory, / for most images, and run says so unless -w or
-v place it). Every profile runs in its own user, PID, mount, IPC, UTS,
cgroup and network namespace. Its network is none (loopback only), filtered
(only the names --allow-domain gives) or full (all but the names
--block-domain gives): restrictive has none, moderate and permissive full, the
agent modes filtered with their lists. Cloud metadata, link-local and the
host's own addresses are refused in every mode unless --allow-cidr names
them. Programs inside need no proxy settings: DNS and every connection end in
agentkernel's own network stack, which checks them; a refusal is immediate,
and the run ends with one line saying what was blocked and how to allow it.

When 'agentkernel daemon start' runs a daemon for the same data directory,
run hands the command to it (unless --no-daemon or AGENTKERNEL_NO_DAEMON=1):
the sandbox comes ready from the daemon's warm pool, built from the same
spec, and the command gets this terminal's stdin, stdout and stderr, its
signals and its exit status exactly as here. A run with -B gvisor, docker or
podman takes that backend's pool ('daemon prewarm -B gvisor' fills one): a
sandbox booted ahead, the command run in it; when that pool has no sandbox
ready, the run builds its own here, as without a daemon. Runs with -t,
--interactive or --keep, and any run when no daemon answers, build their
sandbox here.

Signals reach the command as in a terminal: Ctrl-C (SIGINT) and SIGQUIT go to
its whole foreground job, the others to the command; a command still running
3 s after SIGINT, SIGTERM or SIGHUP, or at a second one, is killed.

Exit status: the command's own, 128+N when it died of signal N (130 after
Ctrl-C; 137, with a line saying so, when the --memory limit killed it), 124
when --timeout ended it, 125 when agentkernel failed, 126 when the command
cannot be invoked or [security.commands] in agentkernel.toml does not allow
it, 127 when it does not exist.`

// RunExample is run's --help examples.
const RunExample = `  agentkernel run python3 -c 'print(1)'
  agentkernel run -- sh -c 'echo $HOSTNAME; id'
  agentkernel run --image alpine:3.20 -p restrictive -- ls /workspace
  agentkernel run -e DEBUG=1 -v "$PWD/data:/data:ro" -- ./process /data
  agentkernel run --memory 64m --pids 64 --timeout 30s -- make test
  agentkernel run -t -- sh                       # interactive shell
  echo hi | agentkernel run -- cat               # stdin is passed through
  agentkernel run --dry-run -- npm test          # print the resolved spec
  agentkernel run --receipt r.json -- make test  # a signed receipt of the run ('agentkernel receipt verify r.json')
  agentkernel run --network filtered --allow-domain '*.pypi.org' --allow-domain files.pythonhosted.org -- pip install requests
  agentkernel run -P 8080:8000 -- python3 -m http.server 8000   # on http://127.0.0.1:8080
  agentkernel run -S GITHUB_TOKEN:api.github.com -- sh -c 'curl -H "Authorization: Bearer $GITHUB_TOKEN" https://api.github.com/user'`

// RunOptions are run's own flags (see BindRunFlags).
type RunOptions struct {
	overrides policy.Overrides
	backend   string
	dryRun    bool
	noDaemon  bool
	daemon    *daemonClient // set by RunCommand when the daemon may serve the run
	habits    runHabits     // upstream's and docker's flags (runflags.go)
	secrets   []string      // -S/--secret bindings (secretflags.go)
	cfgSecret []SecretFlag  // [secrets] bindings of trusted configuration (secretflags.go)
	// --secret-file keys and --placeholder-secrets (secretfiles.go)
	secretFiles        []string
	placeholderSecrets bool
	// receipt is --receipt FILE; tee, set while the run goes on, the
	// command's output on its way to the receipt.
	receipt  string
	tee      *OutputTee
	resolved *sandbox.Spec
}

// BindRunFlags registers run's flags (the sandbox's, BindSpecFlags, and
// --backend, --dry-run, --no-daemon) into fs. Parsing stops at the first
// argument that is not a flag: "run python3 -c x" gives -c to python3.
func BindRunFlags(fs *pflag.FlagSet, o *RunOptions) {
	fs.SetInterspersed(false)
	BindSpecFlags(fs, &o.overrides)
	fs.StringVarP(&o.backend, "backend", "B", "", "sandbox backend: native (the default), gvisor (gVisor's runsc; root only), docker or podman (containers of that engine, through its API), auto (gvisor where it works here and takes the run, else native); the others are loopback only, and gvisor runs ephemeral sandboxes only: docs/backends.md; default: [sandbox] backend of the configuration")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print the resolved sandbox spec as JSON and exit")
	fs.BoolVar(&o.noDaemon, "no-daemon", false, "build the sandbox here even when a daemon with warm sandboxes is running")
	fs.StringVar(&o.receipt, "receipt", "", "write a signed execution receipt of the run to `FILE` (never through the daemon; 'agentkernel receipt verify FILE' checks it)")
	bindRunHabitFlags(fs, &o.habits)
	bindSecretFlags(fs, o)
}

// ChangedFlags is the set of fs's flags given on the command line, by
// long name (policy.Overrides.Set).
func ChangedFlags(fs *pflag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { set[f.Name] = true })
	return set
}

// RunCommand is 'run': o's flags were parsed, set are the flags given
// (ChangedFlags), args the command.
func (a *App) RunCommand(ctx context.Context, o *RunOptions, set map[string]bool, args []string) error {
	o.overrides.Set = set
	if err := checkRunHabits(o, set, args); err != nil {
		return err
	}
	if set["template"] {
		if err := a.UseTemplate(o.habits.template); err != nil {
			return err
		}
	}
	if !set["backend"] {
		o.backend = a.ConfigBackend()
	}
	if !isNative(o.backend) && !isAuto(o.backend) {
		defer leaveNative()()
	}
	if err := a.checkSecretRun(o); err != nil {
		return err
	}
	if set["receipt"] {
		return a.runWithReceipt(ctx, o, args)
	}
	if o.habits.persistent() && !o.dryRun {
		return a.runPersistent(ctx, o, args)
	}
	if !a.servesBackend(o.backend) {
		return ErrNeedsFull
	}
	return a.runRun(ctx, o, args)
}

// servesBackend reports whether this binary serves runs on the backend
// called name (-B, or [sandbox] backend): native always; the others when
// MoreBackends has them, or when MoreBackends are all there are
// (PartialBackends false), which then serves or refuses any name.
func (a *App) servesBackend(name string) bool {
	if isNative(name) {
		return true
	}
	if a.MoreBackends == nil {
		return false
	}
	if !a.PartialBackends {
		return true
	}
	for _, b := range a.MoreBackends() {
		if strings.EqualFold(b.Name(), name) {
			return true
		}
	}
	return false
}

// isNative reports whether backend names the native backend ("": the
// default).
func isNative(backend string) bool { return backend == "" || strings.EqualFold(backend, "native") }

// isAuto reports whether backend is -B auto, as sandbox.Manager reads it.
func isAuto(backend string) bool { return strings.EqualFold(strings.TrimSpace(backend), AutoBackend) }

// leaveNative ends the sandbox thread package prestart may have started
// during start-up, for a run that goes to another backend than native:
// prestart reads -B, but not [sandbox] backend of the configuration nor
// what auto picks, so it starts one for such runs too. The thread ends
// at once, without waiting for it; the function returned, called before
// the run returns, waits until it has ended and its namespaces' PID 1
// is reaped, so that nothing of it outlives the run.
func leaveNative() (wait func()) {
	if prestart.Pending() {
		TraceStage("sandbox thread discarded: another backend")
	}
	prestart.Discard()
	return prestart.Abandon
}

// runWithReceipt is a run given --receipt FILE: checked first (the file,
// the signing key), never served by the daemon (its output must pass
// here to be hashed), then run as any other with the output teed, and
// its receipt issued whatever the outcome.
func (a *App) runWithReceipt(ctx context.Context, o *RunOptions, args []string) error {
	switch {
	case o.receipt == "":
		return runUsage("--receipt needs a FILE")
	case o.dryRun:
		return runUsage("--receipt and --dry-run contradict each other: a dry run runs nothing")
	case o.habits.detach:
		return runUsage("--receipt and -d contradict each other: -d runs no command")
	}
	if !a.servesBackend(o.backend) {
		return ErrNeedsFull
	}
	if err := a.prepareReceipt(o.receipt); err != nil {
		return err
	}
	o.noDaemon = true
	tee, err := NewOutputTee(a.Stdout, a.Stderr)
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	o.tee = tee
	rec := ReceiptRecord{File: o.receipt, Command: args, Backend: o.backend, NoNetwork: o.overrides.NoNetwork, Fast: o.habits.fast, Keep: o.habits.keep}
	var runErr error
	if o.habits.persistent() {
		runErr = a.runPersistent(ctx, o, args)
	} else {
		runErr = a.runRun(ctx, o, args)
	}
	if !strings.EqualFold(o.backend, AutoBackend) {
		rec.Backend = o.backend // what auto picked, when it did
	}
	s := o.resolved
	if s == nil {
		// Nothing ran: the run failed before its sandbox was asked for.
		tee.Close()
		return runErr
	}
	rec.Image, rec.Profile = s.Image, s.Profile
	if s.RequestedImage != "" {
		rec.Image = s.RequestedImage
	}
	return a.issueReceipt(rec, tee, runErr)
}

func (a *App) runRun(ctx context.Context, o *RunOptions, args []string) error {
	TraceStage("runRun")
	if ctx == nil {
		ctx = context.Background()
	}
	// A run through the daemon gets ready while the spec resolves.
	if dc := a.startDaemonRun(o); dc != nil {
		defer dc.Close()
		o.daemon = dc
		prestart.Discard() // the daemon builds the sandbox
	}
	spec, err := a.resolveRunSpec(&o.overrides, args, true, o.backend)
	if err != nil {
		return err
	}
	if err := a.bindSecrets(ctx, o, spec); err != nil {
		return err
	}
	if strings.EqualFold(o.backend, AutoBackend) {
		if a.PickAuto == nil {
			return ErrNeedsFull
		}
		b, why := a.PickAuto(ctx, spec)
		if o.dryRun {
			a.Infof("agentkernel: -B auto: backend %s (%s)", b, why)
		} else {
			if a.Logger != nil {
				a.Logger.Info("-B auto", "backend", b, "why", why)
			}
		}
		o.backend = b
		if !isNative(b) {
			defer leaveNative()()
		}
	}
	if o.dryRun {
		if n := a.FallbackNote(spec.Image, spec.ImageRule); n != "" {
			a.Warnf("%s", n)
		}
		a.FlushWarnings()
		enc := json.NewEncoder(a.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(spec)
	}
	TraceStage("spec resolved")
	mgr, err := a.Manager()
	if err != nil {
		return err
	}
	if res, err, ok := a.runViaDaemon(ctx, mgr, o.daemon, spec, o.backend); ok {
		if res.NetworkSummary != "" {
			a.Warnf("%s", res.NetworkSummary)
		}
		return a.finishRun(res, err, spec)
	}
	stdio := sandbox.Stdio{Stdin: a.Stdin, Stdout: a.Stdout, Stderr: a.Stderr}
	if o.tee != nil {
		o.resolved = spec
		stdio.Stdout, stdio.Stderr = o.tee.Stdout(), o.tee.Stderr()
	}
	res, err := mgr.Run(ctx, o.backend, spec, stdio)
	if err == nil && res.KeptAt != "" {
		a.Infof("agentkernel: kept the sandbox's writable layer at %s", res.KeptAt)
	}
	if res.NetworkSummary != "" {
		a.Warnf("%s", res.NetworkSummary)
	}
	return a.finishRun(res, err, spec)
}

// ResolveRunSpec resolves the spec 'run' would run for args in the
// current directory: configuration, detection, policy, the egress check.
func (a *App) ResolveRunSpec(ov *policy.Overrides, args []string) (*sandbox.Spec, error) {
	return a.resolveRunSpec(ov, args, false, "")
}

// AutoBackend is the backend name -B and [sandbox] backend take for the
// strongest backend that works here for the run (App.PickAuto).
const AutoBackend = "auto"

// ConfigBackend is [sandbox] backend of the configuration for a command
// run in the current directory: the backend a run or a sandbox gets when
// -B/--backend names none ("" for native). A configuration that does not
// load answers "": the command's own load reports the error, once.
func (a *App) ConfigBackend() string {
	cwd, err := os.Getwd()
	if err != nil {
		return ""
	}
	c, _, err := config.Load(a.loadOptions(cwd))
	if err != nil {
		return ""
	}
	return c.Sandbox.Backend
}

// ResolveRunSpecFor is ResolveRunSpec for a sandbox on backend (-B):
// kept to loopback where that backend has no egress (CheckBackendEgress).
func (a *App) ResolveRunSpecFor(ov *policy.Overrides, args []string, backend string) (*sandbox.Spec, error) {
	return a.resolveRunSpec(ov, args, false, backend)
}

// resolveRunSpec is ResolveRunSpec; sayWhere: a run's own, which warns
// when the project directory is left out (policy.Input.SayWhereItRuns);
// backend: the run's -B (CheckBackendEgress).
func (a *App) resolveRunSpec(ov *policy.Overrides, args []string, sayWhere bool, backend string) (*sandbox.Spec, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("current directory: %w", err)}
	}
	cfg, err := a.LoadConfig(cwd)
	if err != nil {
		return nil, err
	}
	TraceStage("config loaded")
	det := detect.Image(detect.Input{
		ExplicitImage: ov.Image,
		ConfigImage:   cfg.Sandbox.BaseImage,
		ConfigRuntime: cfg.Sandbox.Runtime,
		Args:          args,
		Dir:           cwd,
	})
	TraceStage("detected")
	home, _ := os.UserHomeDir()
	spec, warnings, err := policy.Resolve(policy.Input{
		Config:         cfg,
		Overrides:      *ov,
		Args:           args,
		Cwd:            cwd,
		HomeDir:        home,
		HostEnv:        os.LookupEnv,
		Detected:       det,
		SayWhereItRuns: sayWhere,
		CacheRoot:      a.CacheRoot(),
		DataDir:        a.DataDir,
	})
	if err != nil {
		return nil, &ExitError{Code: ExitAgentkernel, Err: err}
	}
	for _, w := range warnings {
		a.Warnf("%s", w)
	}
	TraceStage("policy resolved")
	if err := a.CheckEgress(spec, cfg, ov); err != nil {
		return nil, err
	}
	if err := a.CheckBackendEgress(backend, spec, cfg, ov); err != nil {
		return nil, err
	}
	return spec, nil
}

// CheckBackendEgress keeps a run on a backend whose sandboxes have
// loopback only (sandbox.LoopbackOnly) to loopback: an explicit request
// for egress (a --network, --allow-domain, --allow-cidr or
// --block-domain flag, network in configuration, -P) is refused, a
// profile's or mode's default egress falls back to loopback with one
// warning.
func (a *App) CheckBackendEgress(name string, spec *sandbox.Spec, cfg *config.Config, ov *policy.Overrides) error {
	if name == "" || strings.EqualFold(name, "native") || a.MoreBackends == nil || (!spec.Network.Mode.Egress() && len(spec.Network.Ports) == 0) {
		return nil
	}
	for _, b := range a.MoreBackends() {
		lo, ok := b.(sandbox.LoopbackOnly)
		if !ok || !strings.EqualFold(b.Name(), name) || !lo.LoopbackOnly() {
			continue
		}
		explicit := cfg.IsSet("security.network") || len(spec.Network.Ports) > 0
		for _, f := range []string{"network", "allow-domain", "allow-cidr", "block-domain"} {
			explicit = explicit || ov.Set[f]
		}
		if explicit {
			return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("backend %s gives sandboxes loopback only so far: no network egress, no published ports", b.Name()),
				Hint: "use --network none (without -P), or -B native"}
		}
		a.Warnf("backend %s: the sandbox has loopback only (network egress needs -B native so far)", b.Name())
		spec.Network = sandbox.Network{Mode: sandbox.NetworkNone}
	}
	return nil
}

// finishRun turns a run's result into agentkernel's exit status, and
// says so when the memory limit killed something: the command itself
// (its status is then a bare 137) or other processes in the sandbox.
func (a *App) finishRun(res sandbox.Result, err error, spec *sandbox.Spec) error {
	if err != nil {
		return RunError(err)
	}
	if res.TimedOut {
		return &ExitError{Code: 124, Err: fmt.Errorf("the command ran past --timeout %s and was stopped", spec.Resources.Timeout.Round(time.Millisecond))}
	}
	if res.OOMKills > 0 {
		if res.MemoryMB == 0 {
			res.MemoryMB = spec.Resources.MemoryMB
		}
		if err := a.reportOOM(res, "raise it with --memory, such as --memory "+suggestMemory(res.MemoryMB)); err != nil {
			return err
		}
	}
	if res.ExitCode != 0 {
		return &ExitError{Code: res.ExitCode}
	}
	return nil
}

// reportOOM says so when the memory limit killed something: the
// command itself, as the error of its bare 137, or other processes in
// the sandbox, as a warning (nil error). hint says how to raise the
// limit.
func (a *App) reportOOM(res sandbox.Result, hint string) error {
	text := res.OOMText()
	if text == "" {
		return nil
	}
	text += "; " + hint
	if res.CommandOOMKilled() {
		return &ExitError{Code: res.ExitCode, Err: errors.New(text)}
	}
	a.Warnf("%s", text)
	return nil
}

// suggestMemory is twice memoryMB in --memory's own syntax.
func suggestMemory(memoryMB int64) string {
	m := 2 * memoryMB
	if m%1024 == 0 {
		return strconv.FormatInt(m/1024, 10) + "g"
	}
	return strconv.FormatInt(m, 10) + "m"
}

// RunError maps a failure to start the sandbox or the command to docker's
// exit codes.
func RunError(err error) error {
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return &ExitError{Code: ExitNotFound, Err: err}
	case errors.Is(err, sandbox.ErrCommandRefused):
		return &ExitError{Code: ExitCannotRun, Err: err,
			Hint: "[security.commands] in agentkernel.toml decides which programs may start ('agentkernel config show' says where it is set)"}
	case errors.Is(err, sandbox.ErrCannotInvoke):
		return &ExitError{Code: ExitCannotRun, Err: err}
	}
	return &ExitError{Code: ExitAgentkernel, Err: err}
}

// Manager wires the Manager with the image store and the backends.
func (a *App) Manager() (*sandbox.Manager, error) {
	var images sandbox.Images = cachedImages{a}
	if a.OpenImages != nil {
		var err error
		if images, err = a.OpenImages(); err != nil {
			return nil, err
		}
	}
	backends := []sandbox.Backend{native.New(native.Options{DataDir: a.DataDir, Logger: a.Logger, Warn: func(s string) { a.Warnf("%s", s) }, AllowDegraded: a.allowDegraded})}
	if a.MoreBackends != nil {
		backends = append(backends, a.MoreBackends()...)
	}
	return sandbox.NewManager(sandbox.ManagerOptions{
		Images:   images,
		Backends: backends,
		Default:  "native",
		Warn:     a.Warnf,
		// Runs write to the audit log only what their network policy
		// refused.
		Audit:    audit.New(a.DataDir),
		Who:      Who("cli"),
		PickAuto: a.PickAuto,
		Info:     a.Infof,
	}), nil
}

// CheckEgress is policy.CheckEgress for a run's or a create's flags and
// configuration: an explicit request for egress that cannot be met here
// is an error, any other falls back to loopback with a warning.
func (a *App) CheckEgress(spec *sandbox.Spec, cfg *config.Config, o *policy.Overrides) error {
	warn, err := policy.CheckEgress(spec, o.Set["network"] || cfg.IsSet("security.network"))
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err,
			Hint: "use --network none (and drop network = true from agentkernel.toml), or run as root"}
	}
	if warn != "" {
		a.Warnf("%s", warn)
	}
	return nil
}

// ErrNeedsFull is the failure of a run that only agentkernel-full can do:
// its image is not cached (it must be pulled, or the registry's answer
// decides), --pull always, the image store cannot serve this process
// as it is, or its backend is not one this binary has (App.PartialBackends). Nothing has happened yet when it is returned: no sandbox, no
// output but held warnings. The agentkernel binary hands such a run, with
// its whole command line, to agentkernel-full.
var ErrNeedsFull = errors.New("this run needs agentkernel-full")

// cachedImages serves 'run' from the image cache alone (package cache):
// no registry client is linked. Anything else is ErrNeedsFull.
type cachedImages struct{ a *App }

func (c cachedImages) Ensure(ctx context.Context, ref, pull string) (image.Rootfs, error) {
	if image.IsHost(ref) {
		c.a.FlushWarnings()
		return image.HostRootfs(), nil
	}
	if p, err := image.ParsePullPolicy(pull); err != nil || p == image.PullAlways {
		return image.Rootfs{}, ErrNeedsFull
	}
	rfs, ok, err := image.Lookup(c.a.DataDir, ref, image.MetaFor(image.DefaultIDMap()))
	if err != nil || !ok {
		return image.Rootfs{}, ErrNeedsFull
	}
	c.a.FlushWarnings()
	return rfs, nil
}

func (cachedImages) Unreachable(error) bool { return false }
func (cachedImages) Host() image.Rootfs     { return image.HostRootfs() }

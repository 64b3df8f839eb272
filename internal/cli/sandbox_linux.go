package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/audit"
	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/detect"
	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/supervisor"
)

const sandboxLong = `Persistent sandboxes: created once, started, used by many 'exec' and
'cp' calls, stopped and started again with their files intact.

'sandbox create' records a sandbox (image pulled, spec resolved) without
starting it; 'sandbox start' starts it: a small supervisor process per
sandbox keeps it running after the CLI exits (no daemon). The sandbox's
writable layer and the copy-on-write view of the project directory at
/workspace (profile moderate) live on disk under the data directory
(sandboxes/NAME/), so what is written there survives stop and start, a
killed supervisor and a reboot; the project directory itself never
changes. /tmp, /run and tmpfs volumes are memory: empty at each start, as
after a machine's reboot.

--ttl (30m, 2h30m, 3d, or seconds) makes a sandbox expire: its supervisor
stops and removes it on time, and a stopped one goes at the next 'sandbox
list', 'start' or 'gc'. 'sandbox list' shows when (EXPIRES);
'sandbox extend-ttl NAME --by 1h' pushes it back. The configuration's
[[files]] are copied in at each start (a project's agentkernel.toml only
its own files), and its [sandbox] name names a sandbox created without
NAME.

Names: 1-63 letters, digits, '-' and '_', starting and ending with a letter
or digit, no '--', '__', '-_' or '_-'.

Docker's names work too: 'agentkernel ps' (sandbox list), 'agentkernel rm
NAME...', 'agentkernel start NAME...' and 'stop NAME...' (each name is
reported; the exit status is 125 when any failed, the others still done),
'agentkernel logs NAME', and 'agentkernel run --name NAME -- COMMAND' or
'run -d --name NAME', which create and start one.`

// sandboxCommands are the persistent-sandbox commands: the "sandbox"
// group, the top-level exec, attach, cp, audit and stats, and the old flat
// names (create, start, stop, remove, list) as hidden aliases.
func sandboxCommands(a *App) []*cobra.Command {
	sb := &cobra.Command{
		Use:     "sandbox",
		Aliases: []string{"sandboxes", "sb"},
		Short:   "Create, start, stop, list and remove persistent sandboxes",
		Long:    sandboxLong,
		Example: `  agentkernel sandbox create dev --image alpine:3.20 --start
  agentkernel exec dev -- apk add git
  agentkernel attach dev
  agentkernel sandbox stop dev && agentkernel sandbox rm dev`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	sb.AddCommand(newSandboxCreateCmd(a), newSandboxStartCmd(a), newSandboxStopCmd(a), newSandboxRestartCmd(a),
		newSandboxRemoveCmd(a), newSandboxListCmd(a), newSandboxInfoCmd(a), newSandboxGCCmd(a),
		newSandboxExtendCmd(a), newSandboxSuperviseCmd(a), newSandboxExpireCmd(a))
	cmds := []*cobra.Command{sb, newExecCmd(a), newAttachCmd(a), newCpCmd(a), newAuditCmd(a), newStatsCmd(a), newLogsCmd(a), newSnapshotCmd(a), newSessionCmd(a), newBenchmarkCmd(a), newSSHCmd(a)}
	// Upstream's flat layout: `agentkernel create NAME` and friends, with
	// docker's names: ps, rm.
	flat := map[string][]string{"remove": {"rm"}, "list": {"ps"}}
	for _, c := range []*cobra.Command{newSandboxCreateCmd(a), newSandboxStartCmd(a), newSandboxStopCmd(a), newSandboxRemoveCmd(a), newSandboxListCmd(a)} {
		c.Hidden = true
		c.Aliases = flat[c.Name()]
		c.Short += " (alias of 'sandbox " + c.Name() + "')"
		cmds = append(cmds, c)
	}
	for _, c := range cmds {
		switch c.Name() {
		case "exec", "attach", "logs":
			c.ValidArgsFunction = a.completeFirstSandboxName(map[string]int{"exec": 0, "attach": 1, "logs": 1}[c.Name()])
		case "cp":
			c.ValidArgsFunction = a.completeCp
		case "stats", "start", "stop", "remove":
			c.ValidArgsFunction = a.completeSandboxNames
		}
	}
	for _, c := range sb.Commands() {
		switch c.Name() {
		case "start", "stop", "restart", "remove":
			c.ValidArgsFunction = a.completeSandboxNames
		case "info", "extend-ttl":
			c.ValidArgsFunction = a.completeFirstSandboxName(1)
		}
	}
	return cmds
}

// sandboxes returns the Manager wired for persistent sandboxes: the
// supervisor's mechanism (state store opened on first use) over the
// native backend, the audit log and who is calling. done releases the
// state store.
func (a *App) sandboxes() (*sandbox.Manager, func(), error) {
	return a.sandboxesFor("cli")
}

// sandboxesFor is sandboxes with the face named in audit entries ("cli",
// "mcp", "api").
func (a *App) sandboxesFor(face string) (*sandbox.Manager, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, &ExitError{Code: ExitAgentkernel, Err: err}
	}
	be := native.New(native.Options{DataDir: a.DataDir, Logger: a.Logger, Warn: func(s string) { a.Warnf("%s", s) }, AllowDegraded: a.AllowDegradedNow})
	// The --config file, for what the supervisor reads of the
	// configuration itself ([orchestrator], for a nomad sandbox).
	configPath := a.ConfigPath
	if configPath != "" {
		if abs, err := filepath.Abs(configPath); err == nil {
			configPath = abs
		}
	}
	sv := &supervisor.Manager{DataDir: a.DataDir, SuperviseCommand: func(name string) []string {
		// exe is run with SuperviseArgv0 as its argv[0] (SuperviseMain);
		// the last argument is [security] allow_degraded, comma-separated.
		return []string{exe, SuperviseArgv0, a.DataDir, name, a.LogLevel, strings.Join(a.AllowDegradedNow(), ","), configPath}
	}, Reclaimer: be, Meter: be, Freezers: a.freezers(), CgroupRemovers: a.cgroupRemovers()}
	if err := os.MkdirAll(a.DataDir, 0o700); err != nil {
		return nil, nil, &ExitError{Code: ExitAgentkernel, Err: err}
	}
	log := audit.New(a.DataDir)
	sv.Expired = func(name string, at time.Time, err error) {
		e := audit.Entry{Time: time.Now().UTC(), Sandbox: name, Action: audit.ActionRemove, Who: runcli.Who(face),
			Details: "expired at " + at.UTC().Format(time.RFC3339)}
		if err != nil {
			e.Error = err.Error()
		}
		if aerr := log.Append(e); aerr != nil {
			a.Warnf("audit log: %v", aerr)
		}
	}
	m := sandbox.NewManager(sandbox.ManagerOptions{
		Images:     lazyImages{a: a},
		Backends:   append([]sandbox.Backend{be}, a.moreBackends()...),
		Default:    "native",
		Warn:       a.Warnf,
		Store:      sv,
		Supervisor: sv,
		Connector:  sv,
		HostStats:  sv,
		Audit:      log,
		Who:        runcli.Who(face),
		PickAuto:   a.pickAuto,
		Info:       a.Infof,
	})
	return m, func() { sv.Close() }, nil
}

// lazyImages opens the image store only when a sandbox is created.
type lazyImages struct{ a *App }

func (l lazyImages) open() (imageAdapter, error) {
	s, err := l.a.openImageStore()
	return imageAdapter{s}, err
}

func (l lazyImages) Ensure(ctx context.Context, ref, pull string) (image.Rootfs, error) {
	i, err := l.open()
	if err != nil {
		return image.Rootfs{}, err
	}
	return i.Ensure(ctx, ref, pull)
}
func (l lazyImages) Unreachable(err error) bool { return imageAdapter{}.Unreachable(err) }
func (l lazyImages) Host() image.Rootfs         { return imageAdapter{}.Host() }

// sandboxError maps lifecycle errors to exit codes and hints.
func sandboxError(name string, err error) error {
	var ee *ExitError
	var xe *sandbox.ExpiredError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		return err
	case errors.As(err, &xe):
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("sandbox %s", xe), Hint: "see 'agentkernel sandbox list --all'"}
	case errors.Is(err, sandbox.ErrSandboxNotFound):
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("sandbox %q not found", name), Hint: "see 'agentkernel sandbox list --all'"}
	case errors.Is(err, sandbox.ErrSandboxExists):
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("sandbox %q already exists", name)}
	case errors.Is(err, sandbox.ErrNotRunning):
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("sandbox %q is not running", name), Hint: "start it with 'agentkernel sandbox start " + name + "'"}
	case errors.Is(err, sandbox.ErrRunning):
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("sandbox %q is running", name), Hint: "stop it first, or use 'agentkernel sandbox rm --force " + name + "'"}
	}
	return &ExitError{Code: ExitAgentkernel, Err: err}
}

func validName(name string) error {
	if err := sandbox.ValidateName(name); err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	return nil
}

type createOptions struct {
	overrides   policy.Overrides
	labels      []string
	description string
	ttl         time.Duration // config.ParseTTL's
	start       bool
	branch      bool
	dir         string
	secrets     []string
	template    string
	backend     string
	ssh         bool
	sshUser     string
}

func parseLabels(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			k, v, ok = strings.Cut(kv, ":")
		}
		if !ok || k == "" {
			return nil, usageError("label %q: use KEY=VALUE", kv)
		}
		out[k] = v
	}
	return out, nil
}

func newSandboxCreateCmd(a *App) *cobra.Command {
	var o createOptions
	cmd := &cobra.Command{
		Use:   "create [NAME] [flags]",
		Short: "Create a persistent sandbox (stopped; 'sandbox start' or --start runs it)",
		Long: `Create a persistent sandbox: resolve its spec (profile, image, limits) and
pull its image now, record it stopped. Without NAME the configuration's
[sandbox] name is taken, else a random one is made up; with --branch the name is <project>-<git-branch> of the project
directory, and an existing sandbox of that name is reused (and started with
--start) instead of failing.

--dir names the project directory (default: the current one): it is shown
at /workspace as the profile says (moderate: copy-on-write, permissive:
read-write, restrictive: not at all), and its agentkernel.toml applies.

Secrets: -S/--secret KEY:HOST (or KEY:HOST:HEADER, as for 'agentkernel
run') binds the vault's secret KEY ('agentkernel secret set KEY') to HTTPS
requests to HOST for the sandbox's whole life: inside, every command sees
$KEY=ak-proxy-managed, and the sandbox's network helper puts the real value
in the request's header (Authorization: Bearer, or HEADER) on its way to
HOST. The sandbox records the key's name, host and header, never the value:
each start reads the value from the vault again (a key deleted since fails
the start, named), and a restored snapshot binds the same keys. Its CA (whose
certificate is in the sandbox's trust store) is kept on the host, in the
sandbox's directory. Inline values (KEY=VALUE:HOST) are refused: store them
in the vault. The [secrets] bindings of your own configuration file apply
too; a project's agentkernel.toml cannot bind secrets. The sandbox needs
network egress, and in filtered mode HOST must also be allowed
(--allow-domain HOST).`,
		Example: `  agentkernel sandbox create dev --image alpine:3.20 --label team=ml
  agentkernel sandbox create dev --ttl 2h --start
  agentkernel sandbox create --branch --start          # e.g. myapp-feature-login
  agentkernel sandbox create api --dir ~/src/api -p permissive
  agentkernel sandbox create ci --template python-ci
  agentkernel sandbox create agent --network filtered --allow-domain api.anthropic.com \
      -S ANTHROPIC_API_KEY:api.anthropic.com:x-api-key`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.overrides.Set = runcli.ChangedFlags(cmd.Flags())
			if cmd.Flags().Changed("template") {
				if o.template == "" {
					return usageError("--template needs a template name or file ('agentkernel template list')")
				}
				if err := a.UseTemplate(o.template); err != nil {
					return err
				}
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return a.sandboxCreate(cmd.Context(), name, &o)
		},
	}
	fs := cmd.Flags()
	runcli.BindSpecFlags(fs, &o.overrides)
	for _, n := range []string{"tty", "interactive", "timeout", "keep", "pull"} {
		_ = fs.MarkHidden(n)
	}
	fs.StringArrayVar(&o.labels, "label", nil, "label KEY=VALUE (repeatable)")
	fs.StringVar(&o.description, "description", "", "free-form description")
	fs.Var(&runcli.TTLValue{D: &o.ttl}, "ttl", "stop and remove the sandbox this long after creation, e.g. 30m, 2h30m, 3d (default: never)")
	fs.BoolVar(&o.start, "start", false, "start the sandbox right away")
	fs.BoolVar(&o.branch, "branch", false, "name it <project>-<git-branch> and reuse it if it exists")
	fs.StringVar(&o.dir, "dir", "", "project directory (default: the current directory)")
	fs.StringVar(&o.template, "template", "", "start from a template: a built-in or local name ('agentkernel template list') or a TOML file; above your user config, below the project's agentkernel.toml and the flags")
	fs.StringVarP(&o.backend, "backend", "B", "", "backend to run it on: native (the default), docker or podman (a container of that engine, loopback only: docs/backends.md); default: [sandbox] backend of the configuration")
	fs.BoolVar(&o.ssh, "ssh", false, "serve SSH into the sandbox on 127.0.0.1 while it runs ('agentkernel ssh connect NAME', 'ssh config NAME')")
	fs.StringVar(&o.sshUser, "ssh-user", "", "with --ssh: the login name and certificate principal (default \"sandbox\"; commands run as the sandbox's user)")
	fs.StringArrayVarP(&o.secrets, "secret", "S", nil, "add the vault's secret KEY to HTTPS requests to HOST without it entering the sandbox: KEY:HOST or KEY:HOST:HEADER (repeatable; see Secrets above)")
	return cmd
}

// resolveCreate resolves what sandbox create makes of its flags: the
// sandbox's name (given, the configuration's, --branch's or a random
// one) and its spec, labels and files (Start and Reuse left to the
// caller).
func (a *App) resolveCreate(name string, o *createOptions) (string, *sandbox.CreateRequest, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", nil, &ExitError{Code: ExitAgentkernel, Err: err}
	}
	if o.dir != "" {
		if dir, err = filepath.Abs(o.dir); err != nil {
			return "", nil, &ExitError{Code: ExitAgentkernel, Err: err}
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return "", nil, usageError("--dir %s: not a directory", o.dir)
		}
	}
	if o.branch && name != "" {
		return "", nil, usageError("give either NAME or --branch, not both")
	}
	labels, err := parseLabels(o.labels)
	if err != nil {
		return "", nil, err
	}
	cfg, err := a.LoadConfig(dir)
	if err != nil {
		return "", nil, err
	}
	if name == "" && !o.branch {
		name = cfg.Sandbox.Name
	}
	if name, err = newSandboxName(dir, name, o.branch); err != nil {
		return "", nil, err
	}
	files, err := configFiles(cfg, dir)
	if err != nil {
		return "", nil, &ExitError{Code: ExitAgentkernel, Err: err}
	}
	o.overrides.Name = name
	det := detect.Image(detect.Input{ExplicitImage: o.overrides.Image, ConfigImage: cfg.Sandbox.BaseImage, ConfigRuntime: cfg.Sandbox.Runtime, Dir: dir})
	home, _ := os.UserHomeDir()
	spec, warnings, err := policy.Resolve(policy.Input{Config: cfg, Overrides: o.overrides, Cwd: dir, HomeDir: home, HostEnv: os.LookupEnv, Detected: det,
		CacheRoot: a.CacheRoot(), DataDir: a.DataDir})
	if err != nil {
		return "", nil, &ExitError{Code: ExitAgentkernel, Err: err}
	}
	for _, w := range warnings {
		a.Warnf("%s", w)
	}
	if err := a.CheckEgress(spec, cfg, &o.overrides); err != nil {
		return "", nil, err
	}
	if o.backend == "" {
		o.backend = cfg.Sandbox.Backend // [sandbox] backend, when -B names none
	}
	if err := a.CheckBackendEgress(o.backend, spec, cfg, &o.overrides); err != nil {
		return "", nil, err
	}
	// -S and the [secrets] of trusted configuration, checked now (the
	// vault holds each key) and recorded without their values.
	if err := a.BindSandboxSecrets(context.Background(), o.secrets, cfg, spec); err != nil {
		return "", nil, err
	}
	if o.sshUser != "" && !o.ssh {
		return "", nil, usageError("--ssh-user needs --ssh")
	}
	if o.ssh {
		if o.sshUser != "" {
			if err := validSSHUser(o.sshUser); err != nil {
				return "", nil, err
			}
		}
		spec.SSH = &sandbox.SSHAccess{User: o.sshUser}
	}
	return name, &sandbox.CreateRequest{Name: name, Spec: spec, Labels: labels, Description: o.description, TTL: o.ttl, Files: files, Backend: o.backend}, nil
}

func (a *App) sandboxCreate(ctx context.Context, name string, o *createOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	name, req, err := a.resolveCreate(name, o)
	if err != nil {
		return err
	}
	m, done, err := a.sandboxes()
	if err != nil {
		return err
	}
	defer done()
	req.Start, req.Reuse = o.start, o.branch
	_, created, err := m.Create(ctx, *req)
	if err != nil {
		if errors.Is(err, sandbox.ErrSandboxExists) || errors.Is(err, sandbox.ErrSandboxNotFound) || errors.Is(err, sandbox.ErrNotRunning) {
			return sandboxError(name, err)
		}
		return imageError(err)
	}
	if !created {
		a.Infof("agentkernel: reusing sandbox %s", name)
	}
	fmt.Fprintln(a.Stdout, name)
	return nil
}

// branchName is <project>-<git-branch> for the git work tree holding
// dir, made a valid sandbox name: runs of other characters become one
// '-', at most 63 characters.
// newSandboxName is the name a new sandbox gets: name as given, the
// branch's (--branch, branchName) or a random sandbox-XXXXXXXX, checked.
func newSandboxName(dir, name string, branch bool) (string, error) {
	var err error
	switch {
	case branch:
		if name, err = branchName(dir); err != nil {
			return "", &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("--branch: %w", err)}
		}
	case name == "":
		var b [4]byte
		_, _ = rand.Read(b[:])
		name = "sandbox-" + hex.EncodeToString(b[:])
	}
	if err := validName(name); err != nil {
		return "", err
	}
	return name, nil
}

func branchName(dir string) (string, error) {
	root, branch, err := gitBranch(dir)
	if err != nil {
		return "", err
	}
	project := sanitizeName(filepath.Base(root))
	b := sanitizeName(branch)
	if project == "" {
		project = "project"
	}
	if b == "" {
		return "", fmt.Errorf("branch %q has no usable characters", branch)
	}
	name := project + "-" + b
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-")
	}
	return name, nil
}

// sanitizeName keeps letters and digits and turns every run of anything
// else into one '-', trimmed at both ends.
func sanitizeName(s string) string {
	var b strings.Builder
	dash := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteByte(c)
			continue
		}
		dash = true
	}
	return b.String()
}

// gitBranch finds the work tree holding dir and its checked-out branch by
// reading .git/HEAD (no git binary needed); a detached HEAD is named by
// its first 7 hex digits.
func gitBranch(dir string) (root, branch string, err error) {
	for d := dir; ; d = filepath.Dir(d) {
		gitPath := filepath.Join(d, ".git")
		fi, err := os.Stat(gitPath)
		if err == nil {
			gitDir := gitPath
			if !fi.IsDir() {
				// A worktree or submodule: "gitdir: <path>".
				b, err := os.ReadFile(gitPath)
				if err != nil {
					return "", "", err
				}
				p, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:")
				if !ok {
					return "", "", fmt.Errorf("%s: not a git directory link", gitPath)
				}
				if gitDir = strings.TrimSpace(p); !filepath.IsAbs(gitDir) {
					gitDir = filepath.Join(d, gitDir)
				}
			}
			head, err := os.ReadFile(filepath.Join(gitDir, "HEAD"))
			if err != nil {
				return "", "", err
			}
			h := strings.TrimSpace(string(head))
			if ref, ok := strings.CutPrefix(h, "ref:"); ok {
				return d, strings.TrimPrefix(strings.TrimSpace(ref), "refs/heads/"), nil
			}
			if len(h) >= 7 {
				return d, h[:7], nil
			}
			return "", "", fmt.Errorf("%s/HEAD: unreadable", gitDir)
		}
		if parent := filepath.Dir(d); parent == d {
			return "", "", fmt.Errorf("%s is not inside a git work tree", dir)
		}
	}
}

func nameCmd(a *App, use, short, example string, run func(ctx context.Context, m *sandbox.Manager, name string) error) *cobra.Command {
	return &cobra.Command{
		Use:     use + " NAME",
		Short:   short,
		Example: example,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validName(args[0]); err != nil {
				return err
			}
			m, done, err := a.sandboxes()
			if err != nil {
				return err
			}
			defer done()
			ctx := cmdContext(cmd)
			return sandboxError(args[0], run(ctx, m, args[0]))
		},
	}
}

// namesCmd is a command over one or more sandboxes (NAME...): each is
// done in turn and reported (its name on stdout when done, its error on
// stderr), the others done even when one fails; the exit status is 125
// when any failed. One name alone fails as nameCmd's do.
func namesCmd(a *App, use, short, example string, run func(ctx context.Context, m *sandbox.Manager, name string) error) *cobra.Command {
	return &cobra.Command{
		Use:     use + " NAME...",
		Short:   short,
		Example: example,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, done, err := a.sandboxes()
			if err != nil {
				return err
			}
			defer done()
			ctx := cmdContext(cmd)
			return a.eachName(args, func(name string) error {
				if err := validName(name); err != nil {
					return err
				}
				return sandboxError(name, run(ctx, m, name))
			})
		},
	}
}

// eachName runs do for every name: with one name, its error is the
// command's; with several, each name is reported (on stdout when done,
// its error and hint on stderr when not) and the command fails, exit
// status 125, when any failed.
func (a *App) eachName(names []string, do func(name string) error) error {
	if len(names) == 1 {
		return do(names[0])
	}
	failed := 0
	for _, n := range names {
		if err := do(n); err != nil {
			failed++
			runcli.ExitCode(err, a.Stderr)
			continue
		}
		fmt.Fprintln(a.Stdout, n)
	}
	if failed > 0 {
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("%d of %d sandboxes failed", failed, len(names))}
	}
	return nil
}

func newSandboxStartCmd(a *App) *cobra.Command {
	return namesCmd(a, "start", "Start sandboxes (a supervisor keeps each running)", "  agentkernel sandbox start dev\n  agentkernel start dev scratch",
		func(ctx context.Context, m *sandbox.Manager, name string) error {
			_, err := m.Start(ctx, name)
			return err
		})
}

func newSandboxStopCmd(a *App) *cobra.Command {
	return namesCmd(a, "stop", "Stop sandboxes: SIGTERM to their processes, SIGKILL after 3 s; files are kept", "  agentkernel sandbox stop dev\n  agentkernel stop dev scratch",
		func(ctx context.Context, m *sandbox.Manager, name string) error {
			_, err := m.Stop(ctx, name)
			return err
		})
}

func newSandboxRestartCmd(a *App) *cobra.Command {
	return nameCmd(a, "restart", "Stop and start a sandbox", "  agentkernel sandbox restart dev",
		func(ctx context.Context, m *sandbox.Manager, name string) error {
			_, err := m.Restart(ctx, name)
			return err
		})
}

func newSandboxRemoveCmd(a *App) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:     "remove NAME...",
		Aliases: []string{"rm", "delete"},
		Short:   "Remove sandboxes and their files (--force stops running ones)",
		Example: "  agentkernel sandbox rm dev\n  agentkernel sandbox rm --force dev scratch",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, done, err := a.sandboxes()
			if err != nil {
				return err
			}
			defer done()
			return a.eachName(args, func(n string) error {
				if err := validName(n); err != nil {
					return err
				}
				return sandboxError(n, m.Remove(cmd.Context(), n, force))
			})
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "stop the sandbox first if it is running")
	return cmd
}

func labelString(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + l[k]
	}
	return strings.Join(keys, ",")
}

func age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h"
	}
	return strconv.Itoa(int(d.Hours()/24)) + "d"
}

func newSandboxListCmd(a *App) *cobra.Command {
	var labels []string
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls", "ps"},
		Short:   "List sandboxes (running ones; --all for every one)",
		Example: "  agentkernel sandbox list --all\n  agentkernel sandbox list --label team=ml --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			want, err := parseLabels(labels)
			if err != nil {
				return err
			}
			m, done, err := a.sandboxes()
			if err != nil {
				return err
			}
			defer done()
			out, err := m.List(cmd.Context(), sandbox.ListOptions{Labels: want, RunningOnly: !all && !asJSON})
			if err != nil {
				return sandboxError("", err)
			}
			if asJSON {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATUS\tIMAGE\tBACKEND\tAGE\tEXPIRES\tNETWORK\tPORTS\tLABELS")
			for _, sb := range out {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sb.Name, sb.Status, sb.ImageLabel(), sb.Backend, age(sb.CreatedAt), expiresIn(sb), networkString(sb), portsString(sb.Ports), labelString(sb.Labels))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringArrayVar(&labels, "label", nil, "only sandboxes with label KEY=VALUE (repeatable, all must match)")
	cmd.Flags().BoolVarP(&all, "all", "a", false, "include stopped sandboxes")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (every sandbox unless filtered by label)")
	return cmd
}

func newSandboxInfoCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := nameCmd(a, "info", "Show one sandbox", "  agentkernel sandbox info dev --json", func(ctx context.Context, m *sandbox.Manager, name string) error {
		sb, err := m.Get(ctx, name)
		if err != nil {
			return err
		}
		if asJSON {
			enc := json.NewEncoder(a.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(sb)
		}
		w := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(w, "Name:\t%s\nUUID:\t%s\nStatus:\t%s\n", sb.Name, sb.UUID, sb.Status)
		if sb.StopReason != "" && sb.Status != sandbox.StatusRunning {
			fmt.Fprintf(w, "Stop reason:\t%s\n", sb.StopReason)
		}
		fmt.Fprintf(w, "Image:\t%s\n", sb.ImageLabel())
		if sb.ImageDigest != "" {
			fmt.Fprintf(w, "Digest:\t%s\n", sb.ImageDigest)
		}
		fmt.Fprintf(w, "Backend:\t%s\nProfile:\t%s\n", sb.Backend, sb.Profile)
		writeResources(w, sb.Resources)
		if len(sb.Labels) > 0 {
			fmt.Fprintf(w, "Labels:\t%s\n", labelString(sb.Labels))
		}
		if sb.Description != "" {
			fmt.Fprintf(w, "Description:\t%s\n", sb.Description)
		}
		fmt.Fprintf(w, "Created:\t%s\nLast activity:\t%s\n", sb.CreatedAt.Format(time.RFC3339), sb.LastActivityAt.Format(time.RFC3339))
		if sb.ExpiresAt != nil {
			fmt.Fprintf(w, "Expires:\t%s\n", sb.ExpiresAt.Format(time.RFC3339))
		}
		if sb.Network != "" {
			fmt.Fprintf(w, "Network:\t%s\n", sb.Network)
		}
		if sb.IP != "" {
			fmt.Fprintf(w, "Address:\t%s\n", sb.IP)
		}
		for _, p := range sb.Ports {
			fmt.Fprintf(w, "Published:\t%s\n", p)
		}
		if sb.Status == sandbox.StatusRunning {
			fmt.Fprintf(w, "Supervisor:\tpid %d\n", sb.SupervisorPID)
		}
		fmt.Fprintf(w, "Directory:\t%s\n", sb.Dir)
		return w.Flush()
	})
	cmd.Aliases = []string{"inspect", "show"}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newSandboxGCCmd(a *App) *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove expired sandboxes, leftovers of dead supervisors and orphaned directories",
		Long: `Remove expired sandboxes, the cgroups of stopped ones and directories no
sandbox owns, then what crashed runs left behind (as 'agentkernel gc'). Only
this data directory's (--data-dir) sandboxes and runs are judged.`,
		Example: "  agentkernel sandbox gc --dry-run",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			m, done, err := a.sandboxes()
			if err != nil {
				return err
			}
			defer done()
			res, err := m.GC(cmd.Context(), dryRun)
			removed := res.Removed
			if !dryRun {
				more, gerr := native.GC(cmd.Context(), a.DataDir)
				removed = append(removed, more...)
				err = errors.Join(err, gerr)
			}
			verb := "removed"
			if dryRun {
				verb = "would remove"
			}
			for _, r := range removed {
				fmt.Fprintf(a.Stdout, "%s %s\n", verb, r)
			}
			if err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("gc: %w", err)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only print what would be removed")
	return cmd
}

func newSandboxExtendCmd(a *App) *cobra.Command {
	by := time.Hour
	var cmd *cobra.Command
	cmd = nameCmd(a, "extend-ttl", "Push a sandbox's expiry back (one without a TTL gets one only with --by)", "  agentkernel sandbox extend-ttl dev\n  agentkernel sandbox extend-ttl dev --by 2d",
		func(ctx context.Context, m *sandbox.Manager, name string) error {
			sb, err := m.ExtendTTL(ctx, name, by, cmd.Flags().Changed("by"))
			if err != nil {
				return err
			}
			if sb.ExpiresAt == nil {
				a.Infof("agentkernel: sandbox %s has no TTL and keeps none; give --by to set one", name)
				fmt.Fprintln(a.Stdout, "never")
				return nil
			}
			fmt.Fprintln(a.Stdout, sb.ExpiresAt.Format(time.RFC3339))
			return nil
		})
	cmd.Long = `Push a sandbox's expiry back by --by (default 1h) from when it would have
expired (from now when that has passed) and print the new one. A sandbox
without a TTL keeps none unless --by is given; it then expires --by from
now. Durations: 30m, 2h30m, 3d, or seconds.`
	cmd.Flags().Var(&runcli.TTLValue{D: &by}, "by", "how much longer the sandbox may live")
	return cmd
}

// newSandboxSuperviseCmd is the hidden supervisor mode, as a command
// (`sandbox supervise NAME`); 'sandbox start' runs it as SuperviseMain,
// which skips the command line's set-up.
func newSandboxSuperviseCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:    "supervise NAME",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return supervise(a.DataDir, args[0], a.Logger, func(s string) { a.Warnf("%s", s) }, a.AllowDegradedNow(), a.ConfigPath)
		},
	}
}

// SuperviseMain is the supervisor of sandbox NAME in data directory
// DATA-DIR (its arguments: DATA-DIR NAME [LOG-LEVEL]); it returns the
// exit code.
func SuperviseMain(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "agentkernel: supervise: want DATA-DIR NAME [LOG-LEVEL [ALLOW-DEGRADED [CONFIG]]]")
		return ExitAgentkernel
	}
	level := slog.LevelWarn
	if len(args) > 2 {
		_ = level.UnmarshalText([]byte(args[2]))
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	warn := func(s string) { fmt.Fprintf(os.Stderr, "agentkernel: warning: %s\n", s) }
	var allow []string
	if len(args) > 3 && args[3] != "" {
		allow = strings.Split(args[3], ",")
	}
	configPath := ""
	if len(args) > 4 {
		configPath = args[4]
	}
	if err := supervise(args[0], args[1], logger, warn, allow, configPath); err != nil {
		fmt.Fprintf(os.Stderr, "agentkernel: %v\n", err)
		return runcli.ExitCode(err, io.Discard)
	}
	return 0
}

// supervise boots and serves sandbox name (supervisor.Serve over the
// native backend), telling the starter on fd 3 when
// AGENTKERNEL_SUPERVISOR_READY_FD says so.
func supervise(dataDir, name string, logger *slog.Logger, warn func(string), allowDegraded []string, configPath string) error {
	var ready *os.File
	if os.Getenv("AGENTKERNEL_SUPERVISOR_READY_FD") == "3" {
		ready = os.NewFile(3, "ready")
		_ = os.Unsetenv("AGENTKERNEL_SUPERVISOR_READY_FD")
	}
	fail := func(err error) error {
		if ready != nil {
			fmt.Fprintf(ready, "error: %v", err)
			ready.Close()
		}
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	if err := validName(name); err != nil {
		return fail(err)
	}
	dir := filepath.Join(dataDir, "sandboxes", name)
	if ready != nil {
		// Not inherited by the sandbox's init.
		if err := setCloexec(ready); err != nil {
			return fail(err)
		}
	}
	var serveOpts []supervisor.ServeOption
	if os.Getenv("AGENTKERNEL_SUPERVISOR_LOCK_FD") == "4" {
		// The supervisor lock its starter took (supervisor.WithLock).
		_ = os.Unsetenv("AGENTKERNEL_SUPERVISOR_LOCK_FD")
		lock := os.NewFile(4, "supervisor.lock")
		if err := setCloexec(lock); err != nil {
			return fail(err)
		}
		serveOpts = append(serveOpts, supervisor.WithLock(lock))
	}
	b, err := os.ReadFile(dir + "/spec.json")
	if err != nil {
		return fail(err)
	}
	var spec sandbox.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fail(fmt.Errorf("spec.json: %w", err))
	}
	// Its secrets: the values from the vault, now, and its CA, kept in
	// dir; they reach the network helper over its socket only.
	if spec.Secrets, err = sandboxSecrets(dataDir, dir, &spec); err != nil {
		return fail(err)
	}
	// What the sandbox's network policy refuses goes to the audit log as
	// it happens, as a run's refusals do when it ends.
	auditor := sandbox.NewManager(sandbox.ManagerOptions{Audit: audit.New(dataDir), Who: runcli.Who("supervisor"), Warn: func(string, ...any) {}})
	audits := sandboxAudits{
		onDeny: func(spec *sandbox.Spec, d sandbox.NetworkDenial) {
			auditor.AuditDenials(spec, []sandbox.NetworkDenial{d}, time.Now())
		},
		// Which secret went to which host (names, counts), when the
		// sandbox stops.
		onInject: func(spec *sandbox.Spec, is []sandbox.SecretInjection) {
			auditor.AuditInjections(spec, is, time.Now())
		},
	}
	be := native.New(native.Options{DataDir: dataDir, Logger: logger, Warn: warn,
		AllowDegraded:      func() []string { return allowDegraded },
		OnNetworkDeny:      audits.onDeny,
		OnSecretInjections: audits.onInject})
	booter, err := persistentBooter(spec.Backend, be, moreBackendsFor(dataDir, logger, warn, allowDegraded, configPath, audits))
	if err != nil {
		return fail(err)
	}
	if err := supervisor.Serve(context.Background(), booter, &spec, dir, ready, append(serveOpts, supervisor.WithExpiry(startExpire(dataDir, name, warn)))...); err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	return nil
}

// networkString is a sandbox's network for 'sandbox list': its mode and,
// with egress, its address.
func networkString(sb *sandbox.Info) string {
	switch {
	case sb.IP != "":
		return string(sb.Network) + " " + sb.IP
	case sb.Network != "":
		return string(sb.Network)
	}
	return "-"
}

// portsString lists published ports as HOST->SANDBOX.
func portsString(ps []sandbox.PortMapping) string {
	if len(ps) == 0 {
		return "-"
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return strings.Join(out, ",")
}

package runcli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// RunHabitsHelp is the part of run's --help about upstream's flags and
// docker's habits.
const RunHabitsHelp = `Upstream's flags and docker's habits: -F/--fast (default true) uses a warm
sandbox from the daemon's pool when a daemon runs ('agentkernel daemon
start'); each run still gets a clean sandbox of its own image and profile,
and without a daemon the sandbox is built here. --fast=false never uses the
daemon (as --no-daemon); --fast with --keep, --name, -d or --branch is an
error, pooled sandboxes being ephemeral. --compatibility-mode is --mode.
--rm is accepted and changes nothing: a run's sandbox is always removed.
-k/--keep runs the command in a new persistent sandbox and leaves it
running afterwards, named sandbox-XXXXXXXX (or --name), expiring after 1h
(or --ttl): its name is printed on stderr once the command is done, and
'agentkernel exec NAME -- ...', 'sandbox list' and 'rm -f NAME' work on it
as on any other. --name NAME keeps the run's sandbox as the persistent
sandbox NAME, still running after the command, with no expiry unless --ttl;
--branch does the same under the name <project>-<git-branch>, reusing that
sandbox when it exists; -d (--detach) creates and starts a persistent
sandbox (named by --name, else sandbox-XXXXXXXX) without running a command,
and prints its name; --ttl (30m, 2h30m, 3d, or seconds) sets when such a
sandbox expires: its supervisor stops and removes it then. --template NAME
starts from a template ('agentkernel template list'): its settings sit
above your user config and below ./agentkernel.toml and the flags. Unlike docker's, -p is the security profile (-P publishes a
port), -i the image (--interactive keeps stdin open; stdin is passed to the
command anyway) and -m is --memory as in docker.`

// runHabits are run's flags taken from upstream's 'run' and docker's
// (BindRunHabitFlags).
type runHabits struct {
	fast       bool
	compatMode string
	template   string
	ttl        time.Duration
	branch     bool
	rm         bool
	name       string
	detach     bool
	// keep is -k/--keep (taken from the spec flags' Overrides.Keep).
	keep bool
}

// keepTTL is how long a sandbox kept by --keep lives without --ttl.
const keepTTL = time.Hour

// bindRunHabitFlags registers them into fs.
func bindRunHabitFlags(fs *pflag.FlagSet, h *runHabits) {
	fs.BoolVarP(&h.fast, "fast", "F", true, "use a warm sandbox from the daemon's pool when a daemon runs; --fast=false builds it here (as --no-daemon)")
	fs.StringVar(&h.compatMode, "compatibility-mode", "", "the same as --mode (upstream's name)")
	fs.StringVar(&h.template, "template", "", "start from a template: a built-in or local name ('agentkernel template list') or a TOML file; above your user config, below ./agentkernel.toml and the flags")
	fs.Var(&TTLValue{&h.ttl}, "ttl", "with --keep, --name, -d or --branch: remove the kept sandbox this long after creation, e.g. 30m, 2h30m, 3d (--keep's default: 1h)")
	fs.BoolVar(&h.branch, "branch", false, "run in the persistent sandbox <project>-<git-branch>, created (and kept running) or reused")
	fs.BoolVar(&h.rm, "rm", false, "accepted for docker's sake: a run's sandbox is removed after the run anyway")
	fs.StringVar(&h.name, "name", "", "keep the run's sandbox as the persistent sandbox NAME, running after the command")
	fs.BoolVarP(&h.detach, "detach", "d", false, "create and start a persistent sandbox (NAME from --name) without running a command; print its name")
	if f := fs.Lookup("keep"); f != nil {
		f.Usage = "run in a new persistent sandbox and leave it running (expires after 1h, or --ttl); its name is printed"
	}
}

// TTLValue is a pflag.Value for a persistent sandbox's TTL
// (config.ParseTTL: "30m", "2h30m", "3d" or seconds; zero refused).
type TTLValue struct{ D *time.Duration }

// Set implements pflag.Value.
func (v *TTLValue) Set(s string) error {
	d, err := config.ParseTTL(s)
	if err != nil {
		return err
	}
	*v.D = d
	return nil
}

func (v *TTLValue) String() string {
	if v.D == nil || *v.D == 0 {
		return ""
	}
	return v.D.String()
}

// Type implements pflag.Value.
func (v *TTLValue) Type() string { return "duration" }

// persistent reports whether the run goes to a persistent sandbox.
func (h *runHabits) persistent() bool { return h.name != "" || h.detach || h.branch || h.keep }

// PersistentRun is a run whose sandbox is a persistent one (--name, -d,
// --branch): agentkernel-full's App.RunPersistent runs it.
type PersistentRun struct {
	// Name is --name ("" with --branch, or -d without --name).
	Name string
	// Branch: the name is <project>-<git-branch>, reused when it exists.
	Branch bool
	// Detach: create and start only, no command.
	Detach bool
	// Keep is --keep: a new sandbox (a random name unless Name), left
	// running after the command, whose name is printed at the end.
	Keep bool
	// TTL is --ttl (0: none; with Keep, already its default).
	TTL time.Duration
	// Overrides are the run's sandbox flags; Args the command.
	Overrides *policy.Overrides
	Args      []string
	// Output, when set (--receipt), takes the command's stdout and
	// stderr (ExecOptions.Output), and Resolved is told the spec once it
	// is resolved.
	Output   *OutputTee
	Resolved func(*sandbox.Spec)
	// Backend is -B ("": the default, native).
	Backend string
}

// checkRunHabits checks run's upstream and docker flags against each other
// and the others given (set, by long name), and folds them into o:
// --compatibility-mode into --mode, --fast=false into --no-daemon.
func checkRunHabits(o *RunOptions, set map[string]bool, args []string) error {
	h := &o.habits
	if set["template"] && h.template == "" {
		return runUsage("--template needs a template name or file ('agentkernel template list')")
	}
	if set["compatibility-mode"] {
		if set["mode"] && o.overrides.Mode != h.compatMode {
			return runUsage("--mode %q and --compatibility-mode %q disagree: --compatibility-mode is another name for --mode; give one", o.overrides.Mode, h.compatMode)
		}
		o.overrides.Mode = h.compatMode
		set["mode"] = true
	}
	keeps := ""
	switch {
	case set["keep"] && o.overrides.Keep:
		keeps = "--keep"
	case set["name"]:
		keeps = "--name"
	case set["detach"]:
		keeps = "-d"
	case set["branch"]:
		keeps = "--branch"
	}
	if set["rm"] && h.rm && keeps != "" {
		return runUsage("--rm and %s contradict each other: %s keeps the sandbox", keeps, keeps)
	}
	if set["fast"] {
		switch {
		case h.fast && keeps == "--keep":
			return runUsage("cannot use --fast with --keep (pooled sandboxes are ephemeral): use --fast=false --keep, or leave --fast out")
		case h.fast && keeps != "":
			return runUsage("cannot use --fast with %s (pooled sandboxes are ephemeral): leave --fast out", keeps)
		case h.fast && set["no-daemon"] && o.noDaemon:
			return runUsage("--fast and --no-daemon contradict each other: --fast asks for the daemon's warm pool")
		case !h.fast:
			o.noDaemon = true
		}
	}
	if set["ttl"] && keeps == "" {
		return runUsage("--ttl sets when a sandbox kept with --keep, --name, -d or --branch expires: a plain run's sandbox ends with the run")
	}
	if set["ttl"] && h.ttl <= 0 {
		return runUsage("--ttl must be a positive duration such as 1h")
	}
	if keeps == "" {
		return nil
	}
	// --keep is a persistent sandbox's run, not a flag of the spec.
	if o.overrides.Keep {
		h.keep, o.overrides.Keep = true, false
		if !set["ttl"] {
			h.ttl = keepTTL
		}
	}
	switch {
	case h.name != "" && h.branch:
		return runUsage("give either --name or --branch, not both")
	case set["name"] && h.name == "":
		return runUsage("--name needs a sandbox name")
	case h.keep && h.branch:
		return runUsage("--keep and --branch: --keep makes a new sandbox, --branch reuses the branch's; give one")
	case h.keep && h.detach:
		return runUsage("--keep and -d: -d already leaves the sandbox running; give -d alone (with --ttl for an expiry)")
	case set["timeout"]:
		return runUsage("--timeout and %s: a kept sandbox has no run timeout (use --ttl for when it expires, or 'timeout' inside the command)", keeps)
	case h.detach && (o.overrides.TTY || o.overrides.Interactive):
		return runUsage("-d and -t/--interactive contradict each other: -d runs nothing to talk to ('agentkernel attach NAME' opens a shell)")
	case h.detach && h.branch:
		return runUsage("-d and --branch: use 'agentkernel sandbox create --branch --start' to start the branch's sandbox without a command")
	case h.detach && len(args) > 0:
		return &ExitError{Code: ExitAgentkernel, Err: errors.New("run -d with a command: a sandbox's commands run attached to their caller here, so a command cannot be left running in the background"),
			Hint: "start the sandbox with 'agentkernel run -d --name NAME', then run commands in it with 'agentkernel exec NAME -- COMMAND'"}
	case !h.detach && len(args) == 0:
		return runUsage("%s needs a command to run in the sandbox (or -d to only start it)", keeps)
	}
	if h.name != "" {
		if err := config.ValidateSandboxName(h.name); err != nil {
			return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("--name: %w", err), Hint: "see 'agentkernel sandbox --help' for the rule"}
		}
	}
	return nil
}

// runPersistent runs a run that keeps its sandbox, with RunPersistent
// (agentkernel-full's), or answers ErrNeedsFull where there is none.
func (a *App) runPersistent(ctx context.Context, o *RunOptions, args []string) error {
	if a.RunPersistent == nil {
		return ErrNeedsFull
	}
	if ctx == nil {
		ctx = context.Background()
	}
	h := &o.habits
	return a.RunPersistent(ctx, PersistentRun{Name: h.name, Branch: h.branch, Detach: h.detach, Keep: h.keep, TTL: h.ttl, Overrides: &o.overrides, Args: args,
		Output: o.tee, Resolved: func(s *sandbox.Spec) { o.resolved = s }, Backend: o.backend})
}

// RunHabitsExample is run's --help examples of RunHabitsHelp's flags.
const RunHabitsExample = `  agentkernel run --keep -- make build          # the sandbox stays for 1h; its name is printed
  agentkernel run --name dev -- pip install -r requirements.txt   # dev keeps running
  agentkernel run --branch -- npm test           # in the sandbox of this git branch
  agentkernel run -d --name box --ttl 2h         # start a sandbox, print its name
  agentkernel run --fast=false -m 1g -- make     # no daemon; 1 GiB of memory`

// runUsage is a usage error of run's flags (exit status 125), with the
// hint to see run's help.
func runUsage(format string, args ...any) error {
	return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf(format, args...), Hint: "see 'agentkernel run --help'"}
}

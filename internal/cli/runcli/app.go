// Package runcli is the part of agentkernel's command line that the
// agentkernel binary itself carries: the global flags and 'run', parsed
// with pflag alone (ParseRun, the one parser of a run's command line:
// agentkernel-full hands a run's command line to it too). The cobra
// command tree — the root command, 'run' in its help, and every other
// command — lives in package cli, which builds on this one, and in the
// agentkernel-full binary.
//
// The split exists for start-up time. A Go program initialises every
// package it links before main runs, on every start; 'run' is what users
// and agents type most, and it should not pay for the registry client, the
// SQLite store, the HTTP and MCP servers it does not use. This package and
// what it imports link none of them (TestRunPathDependencies in cmd/agentkernel
// keeps it so). A run that needs them (an image that is not cached yet,
// --pull always) is handed to agentkernel-full before it has done
// anything the user can see: see ErrNeedsFull.
package runcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"runtime/debug"
	"sync"

	"github.com/agentkernel/agentkernel/internal/backend/native/prestart"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/templates"
)

// VersionInfo is stamped into the binary at build time.
type VersionInfo struct {
	Version string
	Commit  string
	Go      string
}

// App carries what every command needs: the streams, the global flags and
// the logger. It is built once in main and passed to each command
// constructor; commands must not use package-level state.
type App struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer

	// Global flags.
	ConfigPath string
	DataDir    string
	LogLevel   string
	Quiet      bool

	Logger  *slog.Logger
	Version VersionInfo

	// OpenImages opens the image store 'run' uses. Nil: cached images
	// only (package cache), and a run whose image is not cached fails
	// with ErrNeedsFull.
	OpenImages func() (sandbox.Images, error)

	// MoreBackends are the backends besides native that runs may name
	// with -B. Nil: a run that names another backend answers
	// ErrNeedsFull.
	MoreBackends func() []sandbox.Backend
	// PartialBackends says MoreBackends are only some of
	// agentkernel-full's (the agentkernel binary has gvisor's, which only
	// executes runsc): a run whose backend is not among them (docker,
	// auto, a name agentkernel-full does not know either) answers
	// ErrNeedsFull before anything is done or printed, and
	// agentkernel-full serves it or refuses it in its own words. False:
	// MoreBackends are all there are (agentkernel-full's), and a run
	// naming another backend is refused here.
	PartialBackends bool
	// PickAuto is -B auto's ladder (agentkernel-full's): the strongest
	// backend that works here for spec, and why. Nil: a run that names
	// auto answers ErrNeedsFull.
	PickAuto func(ctx context.Context, spec *sandbox.Spec) (backend, why string)

	// RunPersistent runs a run that keeps its sandbox as a persistent
	// one (--name, -d, --branch): agentkernel-full's, over the state
	// store. Nil: such a run answers ErrNeedsFull.
	RunPersistent func(ctx context.Context, r PersistentRun) error

	// ResolveSecrets turns a run's -S bindings into the sandbox's secrets:
	// the vault's values and the sandbox's CA (agentkernel-full's, which
	// links the vault and the crypto). Nil: such a run answers
	// ErrNeedsFull.
	ResolveSecrets func(ctx context.Context, flags []SecretFlag) (*sandbox.Secrets, error)
	// SecretValues are the vault's values of keys, in order, for a run's
	// --secret-file (agentkernel-full's). Nil: such a run answers
	// ErrNeedsFull.
	SecretValues func(ctx context.Context, keys []string) ([][]byte, error)

	// Receipts writes the receipts of --receipt (agentkernel-full's,
	// which links the signing). Nil: a run or exec with --receipt answers
	// ErrNeedsFull.
	Receipts ReceiptIssuer

	// Recorder records attach --record's terminal (agentkernel-full's,
	// over package asciicast). Nil: attach --record answers
	// ErrNeedsFull.
	Recorder TerminalRecorder

	// AllowDegraded is [security] allow_degraded of the configuration
	// LoadConfig loaded last (trusted layers only: package config), what
	// the native backend asks when a protection is missing.
	AllowDegraded []string
	configLoaded  bool

	// template is the template of UseTemplate, a layer of every
	// configuration loaded (nil: none).
	template *templates.Template

	// HoldWarnings makes Warnf keep its lines until FlushWarnings, so that
	// a run handed to agentkernel-full does not print them twice.
	HoldWarnings bool
	held         []string
	// once, when set (WarnOnce), keeps the lines Warnf printed.
	once *warnOnce
}

// warnOnce is the set of warning lines already printed.
type warnOnce struct {
	mu   sync.Mutex
	seen map[string]bool
}

// WarnOnce makes Warnf print each distinct line once from now on: the
// commands that resolve many runs from one configuration (parallel,
// pipeline) would otherwise repeat its warnings for each.
func (a *App) WarnOnce() {
	if a.once == nil {
		a.once = &warnOnce{seen: map[string]bool{}}
	}
}

// Warnf prints one warning line to stderr unless --quiet was given.
func (a *App) Warnf(format string, args ...any) {
	if a.Quiet {
		return
	}
	line := fmt.Sprintf("agentkernel: warning: "+format+"\n", args...)
	if o := a.once; o != nil {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.seen[line] {
			return
		}
		o.seen[line] = true
	}
	if a.HoldWarnings {
		a.held = append(a.held, line)
		return
	}
	io.WriteString(a.Stderr, line)
}

// FlushWarnings prints the warnings held so far and stops holding them.
func (a *App) FlushWarnings() {
	a.HoldWarnings = false
	for _, line := range a.held {
		io.WriteString(a.Stderr, line)
	}
	a.held = nil
}

// DropWarnings forgets the warnings held so far (the run goes to
// agentkernel-full, which prints its own).
func (a *App) DropWarnings() { a.held = nil }

// Infof prints one progress line to stderr unless --quiet was given.
func (a *App) Infof(format string, args ...any) {
	if a.Quiet {
		return
	}
	fmt.Fprintf(a.Stderr, format+"\n", args...)
}

// DefaultDataDir is $XDG_DATA_HOME/agentkernel, else
// ~/.local/share/agentkernel, else $TMPDIR/agentkernel-UID (the one rule,
// in package prestart, which reads it before the command line exists).
func DefaultDataDir() string { return filepath.Clean(prestart.DefaultDataDir()) }

// ExitError ends the program with Code after printing
// "agentkernel: <Err>" and, when set, one hint line.
type ExitError struct {
	Code int
	Err  error
	Hint string
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Exit codes shared by every command (docker's convention).
const (
	ExitAgentkernel = 125 // agentkernel itself failed
	ExitCannotRun   = 126 // the command exists but cannot be invoked
	ExitNotFound    = 127 // the command was not found
)

// UsageError is an error in how the command was called (bad flag value,
// missing argument). It exits 125 with the hint to see --help.
func UsageError(format string, args ...any) error {
	return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf(format, args...), Hint: "see 'agentkernel --help'"}
}

// LoadConfig loads the configuration layers for a command run in dir:
// the user file, the template (UseTemplate), then --config or
// dir/agentkernel.toml. Warnings (unknown
// keys) are printed; errors come back as *ExitError with code 125.
func (a *App) LoadConfig(dir string) (*config.Config, error) {
	c, warns, err := config.Load(a.loadOptions(dir))
	for _, w := range warns {
		a.Warnf("%s", w)
	}
	if err != nil {
		hint := "fix the file, or see 'agentkernel init' for a commented example"
		if errors.Is(err, fs.ErrNotExist) {
			hint = "check the --config path"
		}
		return nil, &ExitError{Code: ExitAgentkernel, Err: err, Hint: hint}
	}
	a.AllowDegraded, a.configLoaded = c.Security.AllowDegraded, true
	return c, nil
}

// allowDegraded is App.AllowDegraded for native.Options: that of the
// configuration loaded, or, for a command that loaded none (sandbox
// start), of the trusted layers read now (none where they do not load).
func (a *App) allowDegraded() []string {
	if !a.configLoaded {
		if c, _, err := config.Load(config.LoadOptions{Path: a.ConfigPath, Dir: "."}); err == nil {
			a.AllowDegraded = c.Security.AllowDegraded
		}
		a.configLoaded = true
	}
	return a.AllowDegraded
}

// AllowDegradedNow is allowDegraded for the faces that wire a backend
// themselves (persistent sandboxes' supervisors).
func (a *App) AllowDegradedNow() []string { return a.allowDegraded() }

// ExitCode prints err the way every agentkernel command ends ("agentkernel:
// <error>" and its hint, if any) and returns the process's exit status.
func ExitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintf(stderr, "agentkernel: %v\n", ee.Err)
			if ee.Hint != "" {
				fmt.Fprintf(stderr, "hint: %s\n", ee.Hint)
			}
		}
		return ee.Code
	}
	fmt.Fprintf(stderr, "agentkernel: %v\n", err)
	return ExitAgentkernel
}

// Revision is the commit the binary was built from, when the Go
// toolchain recorded it ("-dirty" when the tree had changes).
func Revision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "unknown", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
			if len(rev) > 12 {
				rev = rev[:12]
			}
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// CacheRoot is where run --cache and [cache] keep the tools' caches:
// <data-dir>/caches ("" without a data directory).
func (a *App) CacheRoot() string {
	if a.DataDir == "" {
		return ""
	}
	return filepath.Join(a.DataDir, "caches")
}

package runcli

import (
	"log/slog"
	"strings"

	"github.com/spf13/pflag"
)

// RootLong is agentkernel's --help text.
const RootLong = `agentkernel runs commands in isolated sandboxes built from OCI images, so
that AI coding agents can execute the code they write without risking the
machine they run on.

  agentkernel run python3 -c 'print(1)'     picks python:3.12-alpine, runs, exits 0
  agentkernel run -p restrictive -- sh -c 'id; ls /'
  agentkernel detect -- cargo test          which image would run this, and why

The default backend is built in: Linux namespaces, an overlay root
filesystem, cgroup limits, seccomp, Landlock and dropped capabilities, with
no daemon and no external runtime. Images are pulled from any OCI registry
and cached by digest; with no registry reachable, auto-detected images fall
back to the host's own read-only toolchain ("host" image).

Configuration lives in agentkernel.toml (see 'agentkernel init').`

// BindGlobalFlags registers the flags every command takes (--config,
// --data-dir, --log-level, --quiet) into fs.
func BindGlobalFlags(fs *pflag.FlagSet, a *App) {
	fs.StringVarP(&a.ConfigPath, "config", "c", "", "use this agentkernel.toml instead of ./agentkernel.toml")
	fs.StringVar(&a.DataDir, "data-dir", DefaultDataDir(), "where images, layers and sandbox state live")
	fs.StringVar(&a.LogLevel, "log-level", "warn", "log verbosity: debug, info, warn, error")
	fs.BoolVarP(&a.Quiet, "quiet", "q", false, "print only the command's own output and errors")
}

// SetupLogging makes the logger --log-level asks for.
func (a *App) SetupLogging() error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(strings.ToLower(a.LogLevel))); err != nil {
		return UsageError("--log-level %q: use debug, info, warn or error", a.LogLevel)
	}
	a.Logger = slog.New(slog.NewTextHandler(a.Stderr, &slog.HandlerOptions{Level: lvl}))
	return nil
}

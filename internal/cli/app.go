// Package cli is the command-line face of agentkernel: one file per
// command group. Commands parse flags into plain values, call the
// packages that do the work, and render the result; they hold no logic of
// their own beyond that.
package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
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
}

// Warnf prints one warning line to stderr unless --quiet was given.
func (a *App) Warnf(format string, args ...any) {
	if a.Quiet {
		return
	}
	fmt.Fprintf(a.Stderr, "agentkernel: warning: "+format+"\n", args...)
}

// Infof prints one progress line to stderr unless --quiet was given.
func (a *App) Infof(format string, args ...any) {
	if a.Quiet {
		return
	}
	fmt.Fprintf(a.Stderr, format+"\n", args...)
}

// DefaultDataDir is $XDG_DATA_HOME/agentkernel, else
// ~/.local/share/agentkernel.
func DefaultDataDir() string {
	if x := os.Getenv("XDG_DATA_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "agentkernel")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return filepath.Join(os.TempDir(), "agentkernel-"+fmt.Sprint(os.Getuid()))
	}
	return filepath.Join(home, ".local", "share", "agentkernel")
}

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

// usageError is an error in how the command was called (bad flag value,
// missing argument). It exits 125 with the hint to see --help.
func usageError(format string, args ...any) error {
	return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf(format, args...), Hint: "see 'agentkernel --help'"}
}

// Package cli is the command-line face of agentkernel: one file per
// command group. Commands parse flags into plain values, call the
// packages that do the work, and render the result; they hold no logic of
// their own beyond that. The root command and 'run' come from package
// runcli, which the agentkernel binary links alone; this package adds
// every other command, for agentkernel-full.
package cli

import (
	"context"
	"errors"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// App carries what every command needs (runcli.App: the streams, the
// global flags, the logger).
type App struct {
	*runcli.App
	// Serve, when set, is where serve's sandboxes live instead of this
	// machine (agentkernel-kube sets it for the kubernetes backend).
	Serve *ServeBackend
}

// NewApp is an App for these streams and version.
func NewApp(base runcli.App) *App {
	b := base
	return &App{App: &b}
}

type (
	// VersionInfo is stamped into the binary at build time.
	VersionInfo = runcli.VersionInfo
	// ExitError ends the program with a code (runcli.ExitError).
	ExitError = runcli.ExitError
)

// Exit codes shared by every command (docker's convention).
const (
	ExitAgentkernel = runcli.ExitAgentkernel
	ExitCannotRun   = runcli.ExitCannotRun
	ExitNotFound    = runcli.ExitNotFound
)

func usageError(format string, args ...any) error { return runcli.UsageError(format, args...) }

// DefaultDataDir is $XDG_DATA_HOME/agentkernel, else
// ~/.local/share/agentkernel.
func DefaultDataDir() string { return runcli.DefaultDataDir() }

// runImages is the image store 'run' uses here: the whole store, which
// pulls what is not cached.
func (a *App) runImages() (sandbox.Images, error) {
	s, err := a.openImageStore()
	if err != nil {
		return nil, err
	}
	return imageAdapter{s}, nil
}

// imageAdapter lets the Manager use the image store with plain strings.
type imageAdapter struct{ s *image.Store }

func (i imageAdapter) Ensure(ctx context.Context, ref, pull string) (image.Rootfs, error) {
	p, err := image.ParsePullPolicy(pull)
	if err != nil {
		return image.Rootfs{}, err
	}
	return i.s.Ensure(ctx, ref, p)
}

func (i imageAdapter) Unreachable(err error) bool { return errors.Is(err, image.ErrUnreachable) }
func (i imageAdapter) Host() image.Rootfs         { return image.HostRootfs() }

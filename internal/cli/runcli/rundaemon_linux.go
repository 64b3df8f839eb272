package runcli

import (
	"context"
	"errors"
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/internal/daemon"
	"github.com/agentkernel/agentkernel/internal/fullbin"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// daemonClient is a run through the daemon (daemon.Client).
type daemonClient = daemon.Client

// startDaemonRun returns a client of the running daemon, setting itself
// up while the spec resolves, or nil when this run will not use one
// (opted out, another backend, no daemon socket).
func (a *App) startDaemonRun(o *RunOptions) *daemonClient {
	if o.noDaemon || o.dryRun || os.Getenv("AGENTKERNEL_NO_DAEMON") != "" && os.Getenv("AGENTKERNEL_NO_DAEMON") != "0" {
		return nil
	}
	if b := strings.ToLower(o.backend); b != "" && b != "native" {
		return nil
	}
	p := daemon.PathsFor(a.DataDir)
	if _, err := os.Stat(p.Run); err != nil {
		return nil
	}
	c := daemon.NewClient(p.Run)
	c.Quiet = a.Quiet
	// The daemon is agentkernel-full: it serves the runs of the
	// agentkernel it was installed with.
	if full, err := fullbin.Path(); err == nil {
		c.Build = daemon.BuildIDOf(full)
	}
	return c
}

// runViaDaemon hands spec to a running daemon of this data directory
// when one answers and the run can be served there; ok is false when the
// caller must run spec itself (nothing ran).
func (a *App) runViaDaemon(ctx context.Context, mgr *sandbox.Manager, dc *daemonClient, spec *sandbox.Spec) (sandbox.Result, error, bool) {
	if dc == nil {
		return sandbox.Result{}, nil, false
	}
	if spec.TTY || spec.Interactive || spec.Keep {
		return sandbox.Result{}, nil, false
	}
	in, ok1 := a.Stdin.(*os.File)
	out, ok2 := a.Stdout.(*os.File)
	errf, ok3 := a.Stderr.(*os.File)
	if !ok1 || !ok2 || !ok3 {
		return sandbox.Result{}, nil, false
	}
	// The image is resolved here, so that its warnings (host fallback)
	// and pull progress show as for a direct run.
	if len(spec.Rootfs.Layers) == 0 && !spec.Rootfs.Host {
		if err := mgr.PrepareRootfs(ctx, spec); err != nil {
			return sandbox.Result{}, err, true
		}
	}
	res, err := dc.Run(spec, in, out, errf)
	if errors.Is(err, daemon.ErrStale) {
		a.Warnf("%v since it started; running without it (restart it: agentkernel daemon stop && agentkernel daemon start)", err)
		return sandbox.Result{}, nil, false
	}
	if errors.Is(err, daemon.ErrNoDaemon) || errors.Is(err, daemon.ErrNotServed) {
		a.Logger.Debug("running without the daemon", "reason", err)
		return sandbox.Result{}, nil, false
	}
	return res, err, true
}

package cli

import (
	"context"
	"errors"
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/internal/daemon"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// runViaDaemon hands spec to a running daemon of this data directory
// when one answers and the run can be served there; ok is false when the
// caller must run spec itself (nothing ran).
func (a *App) runViaDaemon(ctx context.Context, mgr *sandbox.Manager, o *runOptions, spec *sandbox.Spec) (sandbox.Result, error, bool) {
	if o.noDaemon || os.Getenv("AGENTKERNEL_NO_DAEMON") != "" && os.Getenv("AGENTKERNEL_NO_DAEMON") != "0" {
		return sandbox.Result{}, nil, false
	}
	if b := strings.ToLower(o.backend); b != "" && b != "native" {
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
	p := daemon.PathsFor(a.DataDir)
	if _, err := os.Stat(p.Run); err != nil {
		return sandbox.Result{}, nil, false
	}
	// The image is resolved here, so that its warnings (host fallback)
	// and pull progress show as for a direct run.
	if len(spec.Rootfs.Layers) == 0 && !spec.Rootfs.Host {
		if err := mgr.PrepareRootfs(ctx, spec); err != nil {
			return sandbox.Result{}, err, true
		}
	}
	res, err := daemon.Run(p.Run, spec, in, out, errf)
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

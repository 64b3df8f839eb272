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
// (opted out, a backend without warm pools, no daemon socket).
func (a *App) startDaemonRun(o *RunOptions) *daemonClient {
	if o.noDaemon || o.dryRun || os.Getenv("AGENTKERNEL_NO_DAEMON") != "" && os.Getenv("AGENTKERNEL_NO_DAEMON") != "0" {
		return nil
	}
	switch b := strings.ToLower(o.backend); {
	case b == "" || b == "native":
	case b == AutoBackend:
		// Decided once the spec is resolved; the agentkernel binary
		// hands such a run to agentkernel-full.
		if a.PickAuto == nil {
			return nil
		}
	case a.poolBackend(b) == nil:
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

// poolBackend is the backend besides native called name (lower case)
// when it has warm pools (a sandbox.Preparer: gvisor, docker, podman),
// else nil.
func (a *App) poolBackend(name string) sandbox.Backend {
	if a.MoreBackends == nil {
		return nil
	}
	for _, b := range a.MoreBackends() {
		if strings.EqualFold(b.Name(), name) {
			if _, ok := b.(sandbox.Preparer); ok {
				return b
			}
			return nil
		}
	}
	return nil
}

// runViaDaemon hands spec to a running daemon of this data directory
// when one answers and the run can be served there; ok is false when the
// caller must run spec itself (nothing ran). backend is the run's -B
// (auto already decided): native's runs take native's pools, another
// backend's (gvisor, docker, podman) that backend's pool, the one
// 'daemon prewarm -B' fills; such a run that finds its pool empty is
// not served, and runs here as it would without a daemon.
func (a *App) runViaDaemon(ctx context.Context, mgr *sandbox.Manager, dc *daemonClient, spec *sandbox.Spec, backend string) (sandbox.Result, error, bool) {
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
	b := strings.ToLower(strings.TrimSpace(backend))
	if b == "native" {
		b = ""
	}
	if b != "" {
		be := a.poolBackend(b)
		if be == nil {
			return sandbox.Result{}, nil, false
		}
		// What the backend refuses is refused here, in the words of a
		// direct run, before anything is handed over.
		if c, ok := be.(sandbox.Checker); ok {
			if err := c.Check(spec); err != nil {
				return sandbox.Result{}, err, true
			}
		}
	}
	// The image is resolved here, so that its warnings (host fallback)
	// and pull progress show as for a direct run.
	if len(spec.Rootfs.Layers) == 0 && !spec.Rootfs.Host {
		if err := mgr.PrepareRootfs(ctx, spec); err != nil {
			return sandbox.Result{}, err, true
		}
	}
	// The daemon's pools are keyed by the whole spec, the backend in it
	// (as 'daemon prewarm -B' sends it); the spec this run goes on with
	// when the daemon does not serve it stays as it was.
	sent := spec
	if b != "" {
		c := *spec
		c.Backend = b
		sent = &c
	}
	res, err := dc.Run(sent, in, out, errf)
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

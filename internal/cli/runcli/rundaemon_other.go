//go:build !linux

package runcli

import (
	"context"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// daemonClient: the daemon runs on Linux only.
type daemonClient struct{}

func (*daemonClient) Close() {}

func (a *App) startDaemonRun(o *RunOptions) *daemonClient { return nil }

func (a *App) runViaDaemon(ctx context.Context, mgr *sandbox.Manager, dc *daemonClient, spec *sandbox.Spec, backend string) (sandbox.Result, error, bool) {
	return sandbox.Result{}, nil, false
}

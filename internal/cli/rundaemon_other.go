//go:build !linux

package cli

import (
	"context"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// runViaDaemon: the daemon runs on Linux only.
func (a *App) runViaDaemon(ctx context.Context, mgr *sandbox.Manager, o *runOptions, spec *sandbox.Spec) (sandbox.Result, error, bool) {
	return sandbox.Result{}, nil, false
}

//go:build !linux

package cli

import (
	"context"
	"errors"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
)

// runPersistent: persistent sandboxes need the native backend (Linux).
func (a *App) runPersistent(context.Context, runcli.PersistentRun) error {
	return &ExitError{Code: ExitAgentkernel, Err: errors.New("run --name, -d and --branch keep a persistent sandbox, and persistent sandboxes need Linux")}
}

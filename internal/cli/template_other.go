//go:build !linux

package cli

import (
	"context"
	"errors"
)

// templateFromSandbox: persistent sandboxes need Linux.
func (a *App) templateFromSandbox(ctx context.Context, name string) ([]byte, error) {
	return nil, &ExitError{Code: ExitAgentkernel, Err: errors.New("persistent sandboxes need Linux")}
}

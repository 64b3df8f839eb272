package cli

import (
	"context"
	"errors"

	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/supervisor"
	"github.com/agentkernel/agentkernel/internal/templates"
)

// templateFromSandbox renders the spec of the persistent sandbox name as
// a template (templates.FromSpec).
func (a *App) templateFromSandbox(ctx context.Context, name string) ([]byte, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	sv := &supervisor.Manager{DataDir: a.DataDir}
	defer sv.Close()
	spec, err := sv.Spec(ctx, name)
	if err != nil {
		if errors.Is(err, sandbox.ErrSandboxNotFound) {
			return nil, sandboxError(name, sandbox.ErrSandboxNotFound)
		}
		return nil, &ExitError{Code: ExitAgentkernel, Err: err}
	}
	data, err := templates.FromSpec(spec, name)
	if err != nil {
		return nil, &ExitError{Code: ExitAgentkernel, Err: err}
	}
	return data, nil
}

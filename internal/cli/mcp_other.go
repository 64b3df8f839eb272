//go:build !linux

package cli

import "github.com/agentkernel/agentkernel/internal/sandbox"

// mcpManager: without the native backend's supervisor only ephemeral runs
// are wired; the persistent-sandbox tools answer "not available".
func (a *App) mcpManager() (*sandbox.Manager, func(), error) {
	m, err := a.Manager()
	return m, func() {}, err
}

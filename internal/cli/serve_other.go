//go:build !linux

package cli

import "github.com/agentkernel/agentkernel/internal/sandbox"

// serveManager: without the native backend's supervisor only ephemeral
// runs are wired; the persistent-sandbox routes answer 501.
func (a *App) serveManager() (*sandbox.Manager, func(), error) {
	m, err := a.manager()
	return m, func() {}, err
}

package cli

import "github.com/agentkernel/agentkernel/internal/sandbox"

// serveManager is the Manager behind the HTTP API: ephemeral runs and
// persistent sandboxes, audited as "via api".
func (a *App) serveManager() (*sandbox.Manager, func(), error) {
	return a.sandboxesFor("api")
}

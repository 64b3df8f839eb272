package cli

import "github.com/agentkernel/agentkernel/internal/sandbox"

// moreBackends are the backends besides native that agentkernel-full's
// runs may name with -B. Each is registered here, one line apiece.
func (a *App) moreBackends() []sandbox.Backend {
	return nil
}

package cli

import "github.com/agentkernel/agentkernel/internal/sandbox"

// mcpManager is the Manager behind the MCP tools: ephemeral runs and
// persistent sandboxes, audited as "via mcp".
func (a *App) mcpManager() (*sandbox.Manager, func(), error) {
	return a.sandboxesFor("mcp")
}

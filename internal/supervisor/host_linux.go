package supervisor

import (
	"context"

	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/sandboxdir"
)

// Host reports the machine's totals (sandboxdir.Host: the agentkernel
// binary's stats measures them with the same code).
func (m *Manager) Host(ctx context.Context) (sandbox.HostUsage, error) {
	return sandboxdir.Host(ctx, m.DataDir)
}

package cli

import (
	"context"

	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/supervisor"
)

// stackedLayers is what 'images prune' keeps: the layers that persistent
// sandboxes and snapshots of this data directory stack.
func (a *App) stackedLayers() image.StackedLayers {
	return func(ctx context.Context) (map[string][]string, error) {
		sv := &supervisor.Manager{DataDir: a.DataDir}
		defer sv.Close()
		return sv.StackedLayers(ctx)
	}
}

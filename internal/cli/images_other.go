//go:build !linux

package cli

import "github.com/agentkernel/agentkernel/internal/image"

// stackedLayers: persistent sandboxes and snapshots need Linux, so
// nothing outside the image store stacks its layers.
func (a *App) stackedLayers() image.StackedLayers { return nil }

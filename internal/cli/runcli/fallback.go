package runcli

import (
	"github.com/agentkernel/agentkernel/internal/detect"
	image "github.com/agentkernel/agentkernel/internal/image/cache"
)

// FallbackNote says, for an image detection chose (rule), that a run
// falls back to the host's own tools when the image is not cached and its
// registry cannot be reached; "" when it is cached or cannot fall back.
// It reads the local cache only: 'detect' and 'run --dry-run' never reach
// a registry.
func (a *App) FallbackNote(ref, rule string) string {
	if !detect.CanFallBack(ref, rule) {
		return ""
	}
	if _, ok, err := image.Lookup(a.DataDir, ref, image.MetaFor(image.DefaultIDMap())); err != nil || ok {
		return ""
	}
	return detect.FallbackNote(ref)
}

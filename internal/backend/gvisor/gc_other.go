//go:build !linux

package gvisor

import "context"

// GC has nothing to remove on this platform.
func GC(ctx context.Context, dataDir string) ([]string, error) { return nil, nil }

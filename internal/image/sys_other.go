//go:build !linux

package image

// syncTree is a no-op where layers cannot be unpacked anyway.
func syncTree(dir string) error { return syncDir(dir) }

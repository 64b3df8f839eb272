//go:build !linux

package daemon

import "github.com/agentkernel/agentkernel/internal/sandbox"

// Prewarm reports ErrNoDaemon: the daemon runs on Linux only.
func Prewarm(path string, spec *sandbox.Spec, count int) error { return ErrNoDaemon }

//go:build !linux

package daemon

import (
	"os"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Run reports ErrNoDaemon: the daemon runs on Linux only.
func Run(path string, spec *sandbox.Spec, stdin, stdout, stderr *os.File) (sandbox.Result, error) {
	return sandbox.Result{}, ErrNoDaemon
}

// Prewarm reports ErrNoDaemon: the daemon runs on Linux only.
func Prewarm(path string, spec *sandbox.Spec, count int) error { return ErrNoDaemon }

//go:build !linux

package native

import (
	"context"
	"fmt"
	"runtime"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// IsInit reports whether this process is a re-executed sandbox stage;
// never on this platform.
func IsInit() bool { return false }

// InitMain is only meaningful on Linux.
func InitMain() int { return 125 }

// Run fails: the native backend needs Linux.
func (b *Backend) Run(ctx context.Context, spec *sandbox.Spec, stdio sandbox.Stdio) (sandbox.Result, error) {
	return sandbox.Result{}, fmt.Errorf("native backend on %s: %w (it needs Linux namespaces)", runtime.GOOS, sandbox.ErrUnsupported)
}

// GC has nothing to collect on this platform.
func GC(ctx context.Context, dataDir string) ([]string, error) { return nil, nil }

// ConfineProcess is Linux only.
func ConfineProcess() error { return sandbox.ErrUnsupported }

// SeccompProfileJSON builds profiles from Linux's tables only.
func SeccompProfileJSON(profile string, caps []string, guardSetid bool) ([]byte, error) {
	return nil, fmt.Errorf("seccomp profiles are built on Linux: %w", sandbox.ErrUnsupported)
}

// SetidGuardJSON builds profiles from Linux's tables only.
func SetidGuardJSON() ([]byte, error) {
	return nil, fmt.Errorf("seccomp profiles are built on Linux: %w", sandbox.ErrUnsupported)
}

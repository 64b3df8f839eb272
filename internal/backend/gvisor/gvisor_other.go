//go:build !linux

package gvisor

import (
	"context"
	"fmt"
	"runtime"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Run fails: gVisor runs on Linux only.
func (b *Backend) Run(ctx context.Context, spec *sandbox.Spec, stdio sandbox.Stdio) (sandbox.Result, error) {
	return sandbox.Result{}, fmt.Errorf("the gvisor backend needs Linux, not %s: %w", runtime.GOOS, sandbox.ErrUnsupported)
}

func findRunsc() (string, error) {
	return "", fmt.Errorf("the gvisor backend needs Linux, not %s", runtime.GOOS)
}

func checkRunscVersion(ctx context.Context, p string, version *string) error {
	return fmt.Errorf("the gvisor backend needs Linux, not %s", runtime.GOOS)
}

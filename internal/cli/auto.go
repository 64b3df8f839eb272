package cli

import (
	"context"
	"strings"

	"github.com/agentkernel/agentkernel/internal/backend/gvisor"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// pickAuto is -B auto's ladder: gvisor where runsc is found and answers
// its version, the caller is root, and gvisor's Check accepts spec (no
// secrets, no host image, ...); else native. why says what decided.
// spec nil asks about this host only (doctor).
func (a *App) pickAuto(ctx context.Context, spec *sandbox.Spec) (backend, why string) {
	d := gvisor.Diagnose(ctx)
	if d.Problem != "" {
		return "native", "gvisor is not usable here: " + d.Problem
	}
	if spec != nil {
		for _, b := range a.moreBackends() {
			if b.Name() != gvisor.BackendName {
				continue
			}
			if c, ok := b.(sandbox.Checker); ok {
				if err := c.Check(spec); err != nil {
					return "native", "gvisor refuses this run: " + firstLineOf(err.Error())
				}
			}
		}
	}
	return gvisor.BackendName, "runsc " + d.Runsc + " works here and we are root"
}

// firstLineOf is s up to its first newline.
func firstLineOf(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

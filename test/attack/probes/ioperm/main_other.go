//go:build linux && !(amd64 || 386)

package main

import (
	"fmt"
	"runtime"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

// attack has nothing to try: ioperm and iopl exist only on x86.
func attack() {
	report(probe.NotApplicable, fmt.Sprintf("ioperm and iopl do not exist on %s", runtime.GOARCH))
}

// control: there is no target on this architecture.
func control() {
	report(probe.NotApplicable, fmt.Sprintf("ioperm and iopl do not exist on %s", runtime.GOARCH))
}

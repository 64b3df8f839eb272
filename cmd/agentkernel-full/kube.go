package main

import (
	"fmt"
	"os"
	"syscall"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/fullbin"
)

// kubeHandOff replaces this process with agentkernel-kube, which serves
// -B kubernetes, with the same arguments, environment and descriptors.
// It returns only when that fails.
func kubeHandOff() int {
	kube, err := fullbin.KubePath()
	if err == nil {
		err = syscall.Exec(kube, os.Args, os.Environ())
		err = fmt.Errorf("starting %s: %w", kube, err)
	}
	return runcli.ExitCode(&runcli.ExitError{Code: runcli.ExitAgentkernel, Err: err,
		Hint: "agentkernel-kube is built with agentkernel: go build -o bin/ ./cmd/..."}, os.Stderr)
}

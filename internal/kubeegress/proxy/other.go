//go:build !linux

package proxy

import (
	"context"
	"errors"
	"io"

	"github.com/agentkernel/agentkernel/internal/kubeegress"
)

var errLinux = errors.New("the egress proxy runs in a Linux pod only")

// Install is Linux only.
func Install(kubeegress.Rules) error { return errLinux }

// Serve is Linux only.
func Serve(context.Context, kubeegress.Settings, io.Writer, func()) error { return errLinux }

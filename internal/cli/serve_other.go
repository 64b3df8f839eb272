//go:build !linux

package cli

import (
	"context"
	"errors"
	"net"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/api"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// serveManager: without the native backend's supervisor only ephemeral
// runs are wired; the persistent-sandbox routes answer 501.
func (a *App) serveManager() (*sandbox.Manager, func(), error) {
	m, err := a.Manager()
	return m, func() {}, err
}

// daemonListen: the daemon runs on Linux only.
func (a *App) daemonListen(ctx context.Context, o *serveOptions) ([]net.Listener, func(*api.Server) func(), error) {
	return nil, nil, &ExitError{Code: ExitAgentkernel, Err: errors.New("the daemon runs on Linux only")}
}

// listenUnixSocket: serving on a unix socket needs its peer's
// credentials, which are read on Linux only.
func listenUnixSocket(path string) (net.Listener, error) {
	return nil, errors.New("serving on a unix socket needs Linux")
}

// daemonCommands: the daemon runs on Linux only.
func daemonCommands(a *App) []*cobra.Command { return nil }

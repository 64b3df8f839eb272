//go:build !linux

package netlab

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os/exec"
	"testing"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

var errNotLinux = errors.New("netlab needs Linux network namespaces")

// New ends t through testenv.Missing: the lab needs Linux.
func New(t testing.TB, _ ...Option) *Lab {
	t.Helper()
	testenv.Missing(t, "netlab needs Linux network namespaces")
	return nil
}

// InClient fails: see New.
func (l *Lab) InClient(func() error) error { return errNotLinux }

// InInet fails: see New.
func (l *Lab) InInet(func() error) error { return errNotLinux }

// Command runs nothing useful: see New.
func (l *Lab) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "false")
}

// Resolver is the default resolver: see New.
func (l *Lab) Resolver() *net.Resolver { return net.DefaultResolver }

// DialContext fails: see New.
func (l *Lab) DialContext(context.Context, string, string) (net.Conn, error) {
	return nil, errNotLinux
}

// HTTPClient dials nothing: see New.
func (l *Lab) HTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: l.DialContext}}
}

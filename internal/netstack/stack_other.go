//go:build !linux

package netstack

import (
	"io"

	"github.com/agentkernel/agentkernel/internal/netstack/tundev"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Stack is not available on this system.
type Stack struct{}

// New is not supported on this system; it closes cfg.TUN.
func New(cfg Config) (*Stack, error) {
	if cfg.TUN != nil {
		cfg.TUN.Close()
	}
	return nil, ErrUnsupported
}

// Layout is the addressing the stack serves.
func (st *Stack) Layout() tundev.Layout { return tundev.Layout{} }

// Metrics returns the stack's counters.
func (st *Stack) Metrics() Metrics { return Metrics{} }

// Publish is not supported on this system.
func (st *Stack) Publish(m sandbox.PortMapping) (io.Closer, error) { return nil, ErrUnsupported }

// Close does nothing on this system.
func (st *Stack) Close() error { return nil }

// Start is Linux only.
func (st *Stack) Start() {}

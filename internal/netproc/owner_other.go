//go:build !linux

package netproc

import (
	"errors"
	"os"
)

// Proc is a running helper (Linux only).
type Proc struct{}

// Start is Linux only.
func Start(exe string, tun *os.File, cfg Config, onDeny func(Denial)) (*Proc, error) {
	tun.Close()
	return nil, errors.New("sandbox networking needs Linux")
}

// Ready is Linux only.
func (p *Proc) Ready() error { return errors.New("sandbox networking needs Linux") }

// Close is Linux only.
func (p *Proc) Close() (Report, error) { return Report{}, nil }

// Helper is a sandbox's network helper as its owner holds it.
type Helper interface {
	Ready() error
	Close() (Report, error)
}

// StartLazy is Linux only.
func StartLazy(exe string, dev *os.File, cfg Config, onDeny func(Denial)) (Helper, error) {
	return Start(exe, dev, cfg, onDeny)
}

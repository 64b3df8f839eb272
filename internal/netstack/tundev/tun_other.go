//go:build !linux

package tundev

import "os"

// Open is not supported on this system.
func Open(name string) (*os.File, error) { return nil, ErrUnsupported }

// Configure is not supported on this system.
func Configure(name string, l Layout) error { return ErrUnsupported }

// AwaitLocal is Linux only.
func AwaitLocal(l Layout) error { return ErrUnsupported }

// Persist is Linux only.
func Persist(dev *os.File) error { return ErrUnsupported }

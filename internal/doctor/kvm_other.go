//go:build !linux

package doctor

import "errors"

// ProbeKVM fails off Linux.
func ProbeKVM() (int, error) { return 0, errors.New("KVM is Linux only") }

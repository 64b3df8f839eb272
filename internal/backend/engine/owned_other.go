//go:build !linux

package engine

import (
	"errors"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// ownedBinds leaves the spec as it is: idmapped mounts are Linux's.
func (b *Backend) ownedBinds(spec *sandbox.Spec, reserved uint32) (*sandbox.Spec, func(), func(), error) {
	return spec, func() {}, func() {}, nil
}

// gcOwned has nothing to remove: no owned directories but on Linux.
func gcOwned(dataDir string, daemons []int) ([]string, error) { return nil, nil }

// daemonPid is Linux's (the peer of a unix socket).
func (b *Backend) daemonPid() (int, error) { return 0, errors.New("not on this system") }

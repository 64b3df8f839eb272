//go:build !linux

package engine

import "github.com/agentkernel/agentkernel/internal/sandbox"

// ownedBinds leaves the spec as it is: idmapped mounts are Linux's.
func (b *Backend) ownedBinds(spec *sandbox.Spec) (*sandbox.Spec, func(), func(), error) {
	return spec, func() {}, func() {}, nil
}

package policy

import (
	"errors"
	"fmt"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// ErrNoEgress means a caller asked for network egress, which the native
// backend cannot give yet (the network policy proxy does not exist).
var ErrNoEgress = errors.New("network egress is not available yet on the native backend: sandboxes get loopback only")

// NetworkStopgap keeps sandboxes on loopback until the network policy
// proxy exists. A profile or mode that would give egress quietly stays on
// loopback (for a mode, warning says so, since its domain allowlist
// cannot apply); an explicit request for egress (a --network flag, the
// MCP tool's network:true, network = true in agentkernel.toml) is refused
// with ErrNoEgress rather than silently ignored. Every face calls it after
// Resolve.
func NetworkStopgap(spec *sandbox.Spec, explicit bool) (warning string, err error) {
	if spec.Network.Mode != sandbox.NetworkFull {
		return "", nil
	}
	if explicit {
		return "", ErrNoEgress
	}
	if spec.Mode != "" && spec.Mode != config.ModeNative {
		warning = fmt.Sprintf("mode %s: the sandbox has loopback only; the %s domain allowlist applies once egress is available", spec.Mode, spec.Mode)
	}
	spec.Network.Mode = sandbox.NetworkNone
	return warning, nil
}

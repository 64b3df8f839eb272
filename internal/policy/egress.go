package policy

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/fullbin"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// ErrNoEgress means a caller asked for network egress where the native
// backend cannot give it: on a system other than Linux.
var ErrNoEgress = errors.New("network egress needs Linux")

// CheckEgress keeps the sandboxes that cannot have egress here on
// loopback: on a system other than Linux (the native backend gives egress
// on Linux, as root and rootless: through a TUN device, else an HTTP
// proxy), and where the
// network helper, agentkernel-full, is not installed beside agentkernel
// (then with a warning: the installation is incomplete). A profile or
// mode that would give egress stays on loopback (for a mode, warning says
// so, since its domain allowlist cannot apply); an explicit request for
// egress (a --network flag, the MCP tool's network:true, network = true
// in agentkernel.toml) is refused rather than silently ignored. Every
// face calls it after Resolve.
func CheckEgress(spec *sandbox.Spec, explicit bool) (warning string, err error) {
	if !spec.Network.Mode.Egress() {
		return "", nil
	}
	if runtime.GOOS == "linux" {
		// The network helper is agentkernel-full.
		_, err := fullbin.Path()
		if err == nil {
			return "", nil
		}
		if explicit {
			return "", fmt.Errorf("network egress needs its helper: %w", err)
		}
		spec.Network = sandbox.Network{Mode: sandbox.NetworkNone}
		return "the sandbox has loopback only: network egress needs agentkernel-full installed beside agentkernel", nil
	}
	if explicit {
		return "", ErrNoEgress
	}
	if spec.Mode != "" && spec.Mode != config.ModeNative {
		warning = fmt.Sprintf("mode %s: the sandbox has loopback only; the %s domain allowlist applies once egress is available here", spec.Mode, spec.Mode)
	}
	spec.Network = sandbox.Network{Mode: sandbox.NetworkNone}
	return warning, nil
}

package templates

import (
	"bytes"
	"fmt"
	"strconv"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// savedDoc is what FromSpec writes: the keys of agentkernel.toml a
// sandbox's resolved spec gives back.
type savedDoc struct {
	Sandbox struct {
		BaseImage string `toml:"base_image"`
	} `toml:"sandbox"`
	Agent *struct {
		CompatibilityMode string `toml:"compatibility_mode"`
	} `toml:"agent,omitempty"`
	Resources struct {
		VCPUs    float64 `toml:"vcpus,omitempty,omitzero"`
		MemoryMB int64   `toml:"memory_mb,omitempty,omitzero"`
		PIDs     int64   `toml:"pids,omitempty,omitzero"`
		DiskMB   int64   `toml:"disk_mb,omitempty,omitzero"`
		Timeout  string  `toml:"timeout,omitempty,omitzero"`
	} `toml:"resources"`
	Security struct {
		Profile  string `toml:"profile"`
		Network  string `toml:"network"`
		ReadOnly bool   `toml:"read_only,omitempty,omitzero"`
		Seccomp  string `toml:"seccomp,omitempty,omitzero"`
		Domains  *rules `toml:"domains,omitempty"`
		Commands *rules `toml:"commands,omitempty"`
	} `toml:"security"`
	Network *struct {
		AllowCIDRs []string `toml:"allow_cidrs,omitempty,omitzero"`
		AllowUDP   []string `toml:"allow_udp,omitempty,omitzero"`
	} `toml:"network,omitempty"`
}

// rules is [security.domains] and [security.commands].
type rules struct {
	Allow         []string `toml:"allow,omitempty,omitzero"`
	Block         []string `toml:"block,omitempty,omitzero"`
	AllowlistOnly bool     `toml:"allowlist_only,omitempty,omitzero"`
}

// newRules is r, or nil when it holds nothing.
func newRules(allow, block []string, only bool) *rules {
	if len(allow) == 0 && len(block) == 0 && !only {
		return nil
	}
	return &rules{Allow: allow, Block: block, AllowlistOnly: only}
}

// FromSpec renders the settings of a sandbox's resolved spec as a
// template: image, agent mode, resources, profile, seccomp, read-only
// root, network mode and rules, command rules. Not the environment (it
// may hold secrets), mounts, published ports or files (they name this
// host), nor secrets. from names the sandbox in the header comment.
func FromSpec(spec *sandbox.Spec, from string) ([]byte, error) {
	var d savedDoc
	d.Sandbox.BaseImage = spec.Image
	if spec.RequestedImage != "" {
		d.Sandbox.BaseImage = spec.RequestedImage
	}
	if spec.Mode != "" && spec.Mode != config.ModeNative {
		d.Agent = &struct {
			CompatibilityMode string `toml:"compatibility_mode"`
		}{spec.Mode}
	}
	r := spec.Resources
	if r.CPUPercent > 0 {
		d.Resources.VCPUs = float64(r.CPUPercent) / 100
	}
	d.Resources.MemoryMB, d.Resources.PIDs, d.Resources.DiskMB = r.MemoryMB, r.PIDs, r.DiskMB
	if r.Timeout > 0 {
		d.Resources.Timeout = (r.Timeout / time.Second * time.Second).String()
		if r.Timeout < time.Second {
			d.Resources.Timeout = "1s"
		}
	}
	d.Security.Profile = spec.Profile
	if d.Security.Profile == "" {
		d.Security.Profile = config.ProfileModerate
	}
	switch spec.Network.Mode {
	case sandbox.NetworkNone, "":
		d.Security.Network = "none"
	default:
		d.Security.Network = string(spec.Network.Mode)
	}
	d.Security.ReadOnly = spec.ReadOnlyRoot
	d.Security.Seccomp = string(spec.Security.Seccomp)
	n := spec.Network
	d.Security.Domains = newRules(n.AllowDomains, n.BlockDomains, n.AllowlistOnly)
	if c := spec.Commands; c != nil {
		d.Security.Commands = newRules(c.Allow, c.Block, c.AllowlistOnly)
	}
	if len(n.AllowCIDRs) > 0 || len(n.AllowUDP) > 0 {
		d.Network = &struct {
			AllowCIDRs []string `toml:"allow_cidrs,omitempty,omitzero"`
			AllowUDP   []string `toml:"allow_udp,omitempty,omitzero"`
		}{n.AllowCIDRs, n.AllowUDP}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Saved from sandbox %s by 'agentkernel template save'.\n", strconv.Quote(from))
	b.WriteString("# Not saved: its environment, mounts, published ports, files and secrets.\n\n")
	enc := toml.NewEncoder(&b)
	enc.Indent = ""
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	if _, _, err := config.ParseTemplate(b.Bytes(), "template of sandbox "+from); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

package nomad

import (
	"fmt"

	"github.com/agentkernel/agentkernel/internal/config"
)

// LoadOptions reads the backend's options from [orchestrator] of the
// trusted configuration: the user's file, and the file configPath names
// (--config) over it when set; never a project's agentkernel.toml, which
// must not choose the cluster, its token or the nodes' binary.
func LoadOptions(configPath string) (Options, error) {
	var (
		c   *config.Config
		err error
	)
	if configPath != "" {
		c, _, err = config.Load(config.LoadOptions{Path: configPath})
	} else {
		c, _, err = config.LoadUser(config.LoadOptions{})
	}
	if err != nil {
		return Options{}, fmt.Errorf("configuration: %w", err)
	}
	return OptionsOf(c.Orchestrator)
}

// OptionsOf maps [orchestrator] to Options.
func OptionsOf(o config.Orchestrator) (Options, error) {
	out := Options{Address: o.NomadAddr, Token: o.NomadToken, Namespace: o.Namespace,
		NodeAgentkernel: o.NomadAgentkernelPath, NodeDataDir: o.NomadNodeDataDir}
	switch o.NomadDriver {
	case "", "raw_exec", DriverAgentkernel:
		// raw_exec alone isolates nothing: it runs the node's
		// agentkernel, which does.
		out.Driver = DriverAgentkernel
	case DriverExec:
		out.Driver = DriverExec
	default:
		return Options{}, fmt.Errorf("[orchestrator] nomad_driver = %q: the nomad backend takes raw_exec (the node's agentkernel) or exec", o.NomadDriver)
	}
	if o.NomadDatacenter != "" {
		out.Datacenters = []string{o.NomadDatacenter}
	}
	return out, nil
}

package policy

import (
	"fmt"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Mode is an agent compatibility mode.
type Mode struct {
	Name    string `json:"name"`    // canonical name (config.ModeNames)
	Summary string `json:"summary"` // one line for 'agentkernel profiles'

	// BaseProfile is used when neither --profile nor a configuration file
	// names one.
	BaseProfile string `json:"base_profile"`
	// Agent modes mount the project read-write at /workspace and turn the
	// network on: the agent edits the project and calls its API.
	Agent bool `json:"agent"`
	// AllowDomains are the agent's API hosts and the package registries
	// it uses (upstream's always_allow + allow lists).
	AllowDomains []string `json:"allow_domains"`
	// BlockDomains are blocked in addition to MetadataHosts.
	BlockDomains []string `json:"block_domains"`
	// APIKeyEnv is passed from the host when set there.
	APIKeyEnv string `json:"api_key_env"`
}

// MetadataHosts are the cloud metadata endpoints every mode blocks, by
// name and address (the list the network stack enforces).
func MetadataHosts() []string {
	hosts := sandbox.MetadataNames()
	for _, a := range sandbox.MetadataAddrs() {
		hosts = append(hosts, a.String())
	}
	return hosts
}

// Modes returns the mode table. Each call returns fresh data.
func Modes() []Mode {
	return []Mode{
		{
			Name:        config.ModeNative,
			Summary:     "no agent: the profile as it is",
			BaseProfile: config.ProfileModerate,
		},
		{
			Name:        config.ModeClaude,
			Summary:     "Claude Code: project read-write, Anthropic API",
			BaseProfile: config.ProfileModerate,
			Agent:       true,
			AllowDomains: []string{
				"api.anthropic.com", "cdn.anthropic.com",
				"*.pypi.org", "*.npmjs.com", "*.github.com", "*.githubusercontent.com", "*.crates.io",
			},
			APIKeyEnv: "ANTHROPIC_API_KEY",
		},
		{
			Name:        config.ModeCodex,
			Summary:     "OpenAI Codex: restrictive base with network, project read-write",
			BaseProfile: config.ProfileRestrictive,
			Agent:       true,
			AllowDomains: []string{
				"api.openai.com", "cdn.openai.com",
				"*.pypi.org", "*.npmjs.com",
			},
			BlockDomains: []string{"*.internal"},
			APIKeyEnv:    "OPENAI_API_KEY",
		},
		{
			Name:        config.ModeGemini,
			Summary:     "Gemini CLI: project read-write, Google APIs",
			BaseProfile: config.ProfileModerate,
			Agent:       true,
			AllowDomains: []string{
				"generativelanguage.googleapis.com", "*.googleapis.com",
				"*.pypi.org", "*.npmjs.com", "*.github.com",
			},
			APIKeyEnv: "GOOGLE_API_KEY",
		},
	}
}

// LookupMode returns the named mode (case-insensitive, upstream aliases
// accepted); an unknown name is an error that lists the valid ones.
func LookupMode(name string) (Mode, error) {
	n, err := config.ParseMode(name)
	if err != nil {
		return Mode{}, err
	}
	for _, m := range Modes() {
		if m.Name == n {
			return m, nil
		}
	}
	return Mode{}, fmt.Errorf("mode %q has no definition", n) // config and policy disagree
}

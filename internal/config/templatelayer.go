package config

import (
	"fmt"
	"sort"
	"strings"
)

// SourceTemplate is the layer of a template ('--template NAME'): above
// the user file, below the project file and the flags.
const SourceTemplate SourceKind = "template"

// TemplateLayer is a template's agentkernel.toml given to Load.
type TemplateLayer struct {
	// Label names the template in messages and Sources: the built-in's
	// name, or the file it was read from.
	Label string
	// Data is the TOML document.
	Data []byte
}

// templateRefused are the keys a template may not set, by prefix: the
// ones only trusted configuration sets (secret bindings, the degraded
// protections, the API's and the MCP server's access), and those naming
// host files ([[files]], [build]) or host-wide services ([daemon],
// [orchestrator]). A template, like a project's agentkernel.toml, may
// come from someone else.
var templateRefused = []string{"secrets", allowDegradedKey, "api", "mcp", "files", "build", "daemon", "orchestrator"}

// ParseTemplate reads a template's document on its own (over the
// defaults), validates it and refuses the keys a template may not set.
// label is used in messages.
func ParseTemplate(data []byte, label string) (*Config, []Warning, error) {
	c := Defaults()
	warns, err := c.apply(data, label, SourceTemplate)
	if err != nil {
		return nil, warns, err
	}
	if err := checkTemplateKeys(c); err != nil {
		return nil, warns, err
	}
	if err := c.validate(); err != nil {
		return nil, warns, err
	}
	return c, warns, nil
}

// checkTemplateKeys refuses a template that set one of templateRefused.
func checkTemplateKeys(c *Config) error {
	keys := make([]string, 0, len(c.Sources))
	for k := range c.Sources {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, p := range templateRefused {
			if k == p || strings.HasPrefix(k, p+".") || strings.HasPrefix(k, p+"[") {
				s := c.Sources[k]
				return &Error{Path: s.Path, Line: s.Line, Key: k,
					Msg: fmt.Sprintf("a template may not set %s (secret bindings, allow_degraded, [api], [mcp], [[files]], [build], [daemon] and [orchestrator] belong in your own configuration file)", k)}
			}
		}
	}
	return nil
}

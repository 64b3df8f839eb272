package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// templateText is what 'agentkernel init' writes. Image, resources and
// security switches are commented out on purpose: unset, they leave the
// choice to auto-detection and to the profile, which is what a new
// project wants (upstream's runtime = "base" pinned alpine and so turned
// detection off).
const templateText = `# agentkernel.toml: settings for 'agentkernel run' in this directory.
#
# Precedence: command-line flags > this file > ~/.config/agentkernel/config.toml
# > built-in defaults. 'agentkernel config show' prints every effective value
# and where it came from; 'agentkernel profiles' shows what the profiles do.

[sandbox]
name = "{{.Name}}"
# The image. Leave both unset to auto-detect it from the command, the project
# files and the Procfile (see 'agentkernel detect --table').
# base_image = "python:3.12-alpine"
# runtime = "python"        # python, node, go, rust, ruby, java, c, dotnet, base
# The backend when -B names none: native (the default), gvisor, docker or
# podman (docs/backends.md).
# backend = "native"

[agent]
preferred = "{{.Agent}}"
# Agent compatibility mode: native, claude, codex or gemini. The agent modes
# mount this directory read-write at /workspace, turn the network on and add
# the agent's API domains.
# compatibility_mode = "{{.Mode}}"

[resources]
# Unset limits come from the security profile.
# vcpus = 1
# memory_mb = 2048
# pids = 1024
# timeout = "10m"           # a duration, or a number of seconds

[security]
# permissive, moderate or restrictive.
profile = "moderate"
# These override the profile when set:
# network = true
# mount_cwd = "cow"         # rw, cow (copy-on-write), ro or none
# mount_home = false        # $HOME read-only at /home/user
# pass_env = false          # true (HOME, USER, LANG, LC_ALL, TERM), false, or a list
# read_only = false         # read-only root filesystem with a tmpfs /tmp

[security.domains]
# Egress rules; cloud metadata endpoints are always blocked.
# allow = ["*.pypi.org", "*.npmjs.com"]
# block = []
# allowlist_only = false

[security.commands]
# Which programs may be started as argv[0] (easy to bypass with 'sh -c').
# block = ["curl"]
# allowlist_only = false

[mcp]
# The MCP server ('agentkernel mcp-server', /mcp on 'agentkernel serve') lets a
# tool call's cwd be this directory or below it. List other host directories
# it may use (absolute paths; each allows what is below it; "/" never):
# allowed_dirs = ["/home/me/shared-libs"]

[cache]
# Package and build caches kept under the data directory and shared by every
# sandbox that names them, so a second 'go test' or 'pip install' reuses
# downloads: go, pip, npm, cargo (also 'run --cache go,pip'). Every sandbox
# that uses a cache can change what the next one reads from it.
# tools = ["go", "pip"]

# [[files]]                 # copy a host file into the sandbox
# source = ".env.sandbox"
# dest = "/workspace/.env"
`

// Template returns the commented agentkernel.toml that 'agentkernel init'
// writes for a sandbox called name used with agent. name is made a valid
// sandbox name (TemplateName) and agent must be one of AgentNames.
func Template(name, agent string) ([]byte, error) {
	agent = strings.ToLower(agent)
	if !slices.Contains(AgentNames(), agent) {
		return nil, fmt.Errorf("unknown agent %q: use %s", agent, strings.Join(AgentNames(), ", "))
	}
	mode := agent
	if _, err := ParseMode(agent); err != nil {
		mode = ModeNative
	}
	n := TemplateName(name)
	if err := ValidateSandboxName(n); err != nil {
		return nil, err
	}
	// Three plain substitutions of checked values (a valid sandbox name,
	// a known agent and mode): text/template would add nothing, and its
	// package init would run in every agentkernel start.
	return []byte(strings.NewReplacer("{{.Name}}", n, "{{.Agent}}", agent, "{{.Mode}}", mode).Replace(templateText)), nil
}

// TemplateName turns a directory name into a valid sandbox name: other
// characters become '-', runs of separators collapse, the ends are
// trimmed and the result is cut to 63 characters; "my-sandbox" if nothing
// is left.
func TemplateName(s string) string {
	var b strings.Builder
	sep := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isAlnum(c) {
			b.WriteByte(c)
			sep = false
			continue
		}
		if !sep && b.Len() > 0 {
			if c == '_' {
				b.WriteByte('_')
			} else {
				b.WriteByte('-')
			}
			sep = true
		}
	}
	out := b.String()
	if len(out) > 63 {
		out = out[:63]
	}
	out = strings.TrimRight(out, "-_")
	if out == "" {
		return "my-sandbox"
	}
	return out
}

// WriteTemplate writes Template(name, agent) to path, refusing to replace
// an existing file (the check and the create are one atomic open); the
// error then wraps fs.ErrExist.
func WriteTemplate(path, name, agent string) error {
	data, err := Template(name, agent)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return existsError{path}
		}
		return fmt.Errorf("cannot create %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	return nil
}

// DefaultTemplateName is the name 'init' uses for a project in dir.
func DefaultTemplateName(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "my-sandbox"
	}
	return TemplateName(filepath.Base(abs))
}

// existsError says the file is there; it matches fs.ErrExist.
type existsError struct{ path string }

func (e existsError) Error() string {
	return e.path + " already exists; edit it, or remove it to start again"
}

func (e existsError) Unwrap() error { return fs.ErrExist }

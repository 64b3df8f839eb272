package config

import (
	"fmt"
	"strings"
)

// Profile names. Package policy defines what each one means.
const (
	ProfilePermissive  = "permissive"
	ProfileModerate    = "moderate"
	ProfileRestrictive = "restrictive"
)

// Agent compatibility mode names. Package policy defines what each one
// means.
const (
	ModeNative = "native"
	ModeClaude = "claude"
	ModeCodex  = "codex"
	ModeGemini = "gemini"
)

// BackendNames lists what [sandbox] backend accepts: the backends a run
// or a sandbox may be put on when -B/--backend names none. Native is the
// built-in one; the others need agentkernel-full (docs/backends.md).
// "auto" is the strongest of them that works for each run (docs/backends.md).
func BackendNames() []string {
	return []string{"native", "gvisor", "docker", "podman", "kubernetes", "nomad", "auto"}
}

// The protections [security] allow_degraded may name: a run goes on
// without one of them, with a warning, only where the user allowed it.
// Seccomp, namespaces and the dropped capabilities are never degraded: a
// host without them cannot run a sandbox at all.
const (
	// DegradeCgroups: memory, pids and CPU limits (a rootless caller
	// without a delegated cgroup, or a root without write access to the
	// cgroup hierarchy).
	DegradeCgroups = "cgroups"
	// DegradeLandlock: the Landlock filesystem fence (a kernel without
	// Landlock, or with it disabled at boot).
	DegradeLandlock = "landlock"
)

// DegradeNames lists what [security] allow_degraded accepts.
func DegradeNames() []string { return []string{DegradeCgroups, DegradeLandlock} }

// ProfileNames lists the security profiles, most open first.
func ProfileNames() []string {
	return []string{ProfilePermissive, ProfileModerate, ProfileRestrictive}
}

// ModeNames lists the agent compatibility modes.
func ModeNames() []string {
	return []string{ModeNative, ModeClaude, ModeCodex, ModeGemini}
}

// ParseProfile normalises a profile name (case-insensitive). Upstream's
// "custom" is accepted as moderate, which is what it meant there.
func ParseProfile(s string) (string, error) {
	switch n := strings.ToLower(strings.TrimSpace(s)); n {
	case ProfilePermissive, ProfileModerate, ProfileRestrictive:
		return n, nil
	case "custom":
		return ProfileModerate, nil
	}
	return "", fmt.Errorf("unknown profile %q: use %s", s, strings.Join(ProfileNames(), ", "))
}

// ParseMode normalises an agent mode name or one of upstream's aliases
// (default, claude-code, claudecode, openai-codex, gemini-cli).
func ParseMode(s string) (string, error) {
	switch n := strings.ToLower(strings.TrimSpace(s)); n {
	case ModeNative, "default":
		return ModeNative, nil
	case ModeClaude, "claude-code", "claudecode":
		return ModeClaude, nil
	case ModeCodex, "openai-codex":
		return ModeCodex, nil
	case ModeGemini, "gemini-cli":
		return ModeGemini, nil
	}
	return "", fmt.Errorf("unknown mode %q: use %s", s, strings.Join(ModeNames(), ", "))
}

// AgentNames lists the agents [agent].preferred and 'init --agent' know.
func AgentNames() []string {
	return []string{"claude", "codex", "gemini", "opencode"}
}

// ValidateSandboxName applies upstream's sandbox name rule: 1-63 ASCII
// letters, digits, '-' and '_', starting and ending with a letter or digit,
// with no two separators in a row.
func ValidateSandboxName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("sandbox name cannot be empty")
	case len(name) > 63:
		return fmt.Errorf("sandbox name too long (max 63 characters)")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !isAlnum(c) && c != '-' && c != '_' {
			return fmt.Errorf("sandbox name %q contains invalid character %q (use letters, digits, '-' and '_')", name, c)
		}
		if i > 0 && !isAlnum(c) && !isAlnum(name[i-1]) {
			return fmt.Errorf("sandbox name %q cannot contain consecutive hyphens or underscores", name)
		}
	}
	if !isAlnum(name[0]) {
		return fmt.Errorf("sandbox name %q must start with a letter or number", name)
	}
	if !isAlnum(name[len(name)-1]) {
		return fmt.Errorf("sandbox name %q must end with a letter or number", name)
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// ValidateDNSLabelName checks a sandbox name for a backend whose objects
// take it into their names (the orchestrators): a DNS label (RFC 1123:
// lower-case letters, digits and '-', starting and ending with a letter
// or digit) of at most max characters. backend names the backend in the
// error.
func ValidateDNSLabelName(name string, max int, backend string) error {
	if name == "" {
		return fmt.Errorf("a sandbox name is required")
	}
	if len(name) > max {
		return fmt.Errorf("sandbox name %.20q… is %d characters: the %s backend takes at most %d", name, len(name), backend, max)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0 && i < len(name)-1
		if !ok {
			return fmt.Errorf("sandbox name %q is not a DNS label: use lower-case letters, digits and '-', starting and ending with a letter or digit", name)
		}
	}
	return nil
}

// Package plugin installs agentkernel into coding agents: it registers
// the MCP server (`agentkernel mcp-server`) in each agent's configuration
// and writes the agent-side files (Claude Code's skill and /sandbox
// command, OpenCode's plugin). Existing configuration files are merged,
// never clobbered: parsed, changed in our own entry only, written
// atomically (temp file + rename) after a one-time .bak backup. A
// target is installed all or nothing: every file is prepared before any
// is written, and a failed write rolls back the others. Installing twice
// changes nothing.
package plugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Targets are the agents `plugin install` knows, in display order ("all"
// installs every one of them).
var Targets = []string{"claude", "codex", "gemini", "opencode", "mcp"}

// ServerName is our key in every agent's MCP server table.
const ServerName = "agentkernel"

// Options say where and how to install.
type Options struct {
	// ProjectDir is the project the agent works in (project-level files).
	ProjectDir string
	// HomeDir is the user's home (global files, --global).
	HomeDir string
	// Global writes the user-level configuration instead of the project's.
	Global bool
	// Force replaces an existing agentkernel entry or file that differs.
	Force bool
	// DryRun reports what would change and writes nothing.
	DryRun bool
	// Command is the executable agents start ("agentkernel" when it is on
	// PATH, else an absolute path).
	Command string
	// Env looks up environment variables (CODEX_HOME,
	// XDG_CONFIG_HOME); nil means os.Getenv.
	Env func(string) string
}

func (o *Options) getenv(k string) string {
	if o.Env != nil {
		return o.Env(k)
	}
	return os.Getenv(k)
}

func (o *Options) command() string {
	if o.Command == "" {
		return "agentkernel"
	}
	return o.Command
}

// Action is what happened (or would happen) to one file.
type Action string

// Actions of a Change.
const (
	Created   Action = "created"
	Merged    Action = "merged"
	Replaced  Action = "replaced"
	Unchanged Action = "already installed"
	Skipped   Action = "skipped"
	Printed   Action = "printed"
)

// Change is the outcome for one file.
type Change struct {
	Path   string
	Action Action
	// Detail explains a skip or names what was merged.
	Detail string
	// Diff is a short +/- summary of the change (dry runs print it).
	Diff string
	// Backup is the .bak file made before the first change, if any.
	Backup string

	// write is the prepared change, nil when there is nothing to write.
	write *pending
}

// Marker is the one-character prefix `plugin install` prints.
func (c Change) Marker() string {
	switch c.Action {
	case Created:
		return "+"
	case Merged, Replaced:
		return "~"
	case Unchanged:
		return "="
	case Skipped:
		return "-"
	}
	return " "
}

// item is one file a target manages.
type item struct {
	path string
	// kind: "json" (MCP merge at key), "toml" (Codex table), "file"
	// (whole file that is ours).
	kind    string
	key     []string // json: where our entry lives, e.g. mcpServers.agentkernel
	value   any      // json: our entry
	content string   // file: its content
}

// ErrUnknownTarget is returned for a target not in Targets.
var ErrUnknownTarget = errors.New("unknown target")

// items lists what target manages for o (project or global level).
func items(target string, o *Options) ([]item, error) {
	base := o.ProjectDir
	if o.Global {
		base = o.HomeDir
	}
	server := map[string]any{"command": o.command(), "args": []any{"mcp-server"}}
	switch target {
	case "claude":
		mcpFile := filepath.Join(o.ProjectDir, ".mcp.json")
		claudeServer := map[string]any{"type": "stdio", "command": o.command(), "args": []any{"mcp-server"}, "env": map[string]any{}}
		if o.Global {
			mcpFile = filepath.Join(o.HomeDir, ".claude.json")
		}
		return []item{
			{path: mcpFile, kind: "json", key: []string{"mcpServers", ServerName}, value: claudeServer},
			{path: filepath.Join(base, ".claude", "skills", "agentkernel", "SKILL.md"), kind: "file", content: claudeSkill},
			{path: filepath.Join(base, ".claude", "commands", "sandbox.md"), kind: "file", content: claudeCommand},
		}, nil
	case "codex":
		return []item{{path: codexConfig(o), kind: "toml"}}, nil
	case "gemini":
		return []item{{path: filepath.Join(base, ".gemini", "settings.json"), kind: "json", key: []string{"mcpServers", ServerName}, value: server}}, nil
	case "opencode":
		dir := filepath.Join(o.ProjectDir, ".opencode")
		if o.Global {
			dir = filepath.Join(configHome(o), "opencode")
		}
		return []item{
			{path: filepath.Join(dir, "plugins", "agentkernel.ts"), kind: "file", content: opencodePlugin},
			{path: filepath.Join(dir, "package.json"), kind: "json", key: []string{"dependencies", "@opencode-ai/plugin"}, value: "latest"},
		}, nil
	case "mcp":
		return nil, nil
	}
	return nil, fmt.Errorf("%w %q: use one of claude, codex, gemini, opencode, mcp, all", ErrUnknownTarget, target)
}

func configHome(o *Options) string {
	if x := o.getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) {
		return x
	}
	return filepath.Join(o.HomeDir, ".config")
}

// codexConfig is the config.toml Codex reads: the project's
// .codex/config.toml when the project has a .codex directory and
// --global is not given, else $CODEX_HOME/config.toml (~/.codex).
func codexConfig(o *Options) string {
	if !o.Global {
		if fi, err := os.Stat(filepath.Join(o.ProjectDir, ".codex")); err == nil && fi.IsDir() {
			return filepath.Join(o.ProjectDir, ".codex", "config.toml")
		}
	}
	if h := o.getenv("CODEX_HOME"); h != "" && filepath.IsAbs(h) {
		return filepath.Join(h, "config.toml")
	}
	return filepath.Join(o.HomeDir, ".codex", "config.toml")
}

// Install installs target ("claude", "codex", "gemini", "opencode",
// "mcp"), all or nothing: every file is read and its change prepared
// first, and a failure there (an invalid existing file, one that cannot
// be read) returns the error with nothing written; then the changes are
// written, and a failure while writing rolls back those already written.
// A file that must be skipped (ours differs, no --force) is not a
// failure. The changes come back only when nothing failed.
func Install(target string, o Options) ([]Change, error) {
	if target == "mcp" {
		return []Change{{Action: Printed, Diff: Snippet(o.command())}}, nil
	}
	its, err := items(target, &o)
	if err != nil {
		return nil, err
	}
	var out []Change
	for _, it := range its {
		var c Change
		var err error
		switch it.kind {
		case "json":
			c, err = mergeJSON(it.path, it.key, it.value, &o)
		case "toml":
			c, err = mergeCodexTOML(it.path, &o)
		default:
			c, err = writeOwnFile(it.path, it.content, &o)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", it.path, err)
		}
		out = append(out, c)
	}
	if o.DryRun {
		return out, nil
	}
	if err := commitAll(out); err != nil {
		return nil, err
	}
	return out, nil
}

// Status says whether target is installed at one level: every file
// present and every MCP config holding our entry.
type Status struct {
	Target      string
	Project     bool
	Global      bool
	Files       []string // the project-level files
	GlobalFiles []string
}

// List reports the installation state of every target but "mcp".
func List(o Options) []Status {
	var out []Status
	for _, t := range Targets {
		if t == "mcp" {
			continue
		}
		s := Status{Target: t}
		for _, global := range []bool{false, true} {
			oo := o
			oo.Global = global
			its, _ := items(t, &oo)
			ok := len(its) > 0
			var files []string
			for _, it := range its {
				files = append(files, it.path)
				if !global && !within(o.ProjectDir, it.path) {
					ok = false // codex without a project .codex: user-level only
				}
				if !installed(it, &oo) {
					ok = false
				}
			}
			if global {
				s.Global, s.GlobalFiles = ok, files
			} else {
				s.Project, s.Files = ok, files
			}
		}
		out = append(out, s)
	}
	return out
}

// Installed reports whether target is installed at the project level
// (project) and the user level (global).
func Installed(target string, o Options) (project, global bool) {
	for _, s := range List(o) {
		if s.Target == target {
			return s.Project, s.Global
		}
	}
	return false, false
}

func installed(it item, o *Options) bool {
	b, err := os.ReadFile(it.path)
	if err != nil {
		return false
	}
	switch it.kind {
	case "json":
		has, _ := jsonHasKey(b, it.key)
		return has
	case "toml":
		return codexHasServer(b)
	}
	return true
}

// Snippet is the generic MCP configuration for clients not listed.
func Snippet(command string) string {
	return fmt.Sprintf(`{
  "mcpServers": {
    "agentkernel": {
      "command": %q,
      "args": ["mcp-server"],
      "env": {}
    }
  }
}
`, command)
}

func within(dir, path string) bool {
	r, err := filepath.Rel(dir, path)
	return err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator))
}

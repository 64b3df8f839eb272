package plugin

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func opts(t *testing.T) Options {
	t.Helper()
	return Options{ProjectDir: t.TempDir(), HomeDir: t.TempDir(), Command: "agentkernel", Env: func(string) string { return "" }}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("%v\n%s", err, s)
	}
	return m
}

func actions(cs []Change) []Action {
	var out []Action
	for _, c := range cs {
		out = append(out, c.Action)
	}
	return out
}

// A .mcp.json as users have them: other servers, other keys, 4-space indent.
const existingMCP = `{
    "mcpServers": {
        "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"], "env": {"GITHUB_TOKEN": "x"}},
        "postgres": {"type": "stdio", "command": "pg-mcp"}
    },
    "zzz": [1, 2.50, {"a": null}],
    "aaa": "kept in order"
}
`

func TestClaudeMergeKeepsOthers(t *testing.T) {
	o := opts(t)
	path := filepath.Join(o.ProjectDir, ".mcp.json")
	write(t, path, existingMCP)

	// Dry run: nothing written.
	dry := o
	dry.DryRun = true
	cs, err := Install("claude", dry)
	if err != nil || !reflect.DeepEqual(actions(cs), []Action{Merged, Created, Created}) || !strings.Contains(cs[0].Diff, "+ mcpServers.agentkernel") {
		t.Fatalf("dry run: %v %+v", err, cs)
	}
	if read(t, path) != existingMCP {
		t.Fatal("dry run changed .mcp.json")
	}
	if _, err := os.Stat(filepath.Join(o.ProjectDir, ".claude")); !os.IsNotExist(err) {
		t.Fatal("dry run created .claude")
	}

	cs, err = Install("claude", o)
	if err != nil || !reflect.DeepEqual(actions(cs), []Action{Merged, Created, Created}) {
		t.Fatalf("install: %v %+v", err, cs)
	}
	got := read(t, path)
	before, after := decode(t, existingMCP), decode(t, got)
	servers := after["mcpServers"].(map[string]any)
	ak := servers["agentkernel"].(map[string]any)
	if ak["command"] != "agentkernel" || !reflect.DeepEqual(ak["args"], []any{"mcp-server"}) {
		t.Errorf("entry: %v", ak)
	}
	delete(servers, "agentkernel")
	if !reflect.DeepEqual(before, after) {
		t.Errorf("other content changed:\n%s", got)
	}
	// Member order is kept: mcpServers, zzz, aaa; github before postgres before agentkernel.
	if !(strings.Index(got, `"zzz"`) < strings.Index(got, `"aaa"`) && strings.Index(got, `"github"`) < strings.Index(got, `"postgres"`) &&
		strings.Index(got, `"postgres"`) < strings.Index(got, `"agentkernel"`)) {
		t.Errorf("order changed:\n%s", got)
	}
	if read(t, path+".bak") != existingMCP || cs[0].Backup != path+".bak" {
		t.Error("no backup of the original")
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want the original 0600", fi.Mode())
	}
	skill := read(t, filepath.Join(o.ProjectDir, ".claude", "skills", "agentkernel", "SKILL.md"))
	if !strings.HasPrefix(skill, "---\nname: agentkernel\n") {
		t.Errorf("skill: %.80s", skill)
	}
	read(t, filepath.Join(o.ProjectDir, ".claude", "commands", "sandbox.md"))

	// Again: nothing changes.
	cs, err = Install("claude", o)
	if err != nil || !reflect.DeepEqual(actions(cs), []Action{Unchanged, Unchanged, Unchanged}) || read(t, path) != got {
		t.Fatalf("second install: %v %+v", err, cs)
	}
	if p, g := Installed("claude", o); !p || g {
		t.Errorf("installed: project %v global %v", p, g)
	}
}

func TestJSONConflictForceAndInvalid(t *testing.T) {
	o := opts(t)
	path := filepath.Join(o.ProjectDir, ".gemini", "settings.json")
	orig := `{"theme": "dark", "mcpServers": {"agentkernel": {"command": "old-agentkernel"}, "other": {"command": "x"}}}`
	write(t, path, orig)
	cs, err := Install("gemini", o)
	if err != nil || cs[0].Action != Skipped || !strings.Contains(cs[0].Detail, "--force") || read(t, path) != orig {
		t.Fatalf("conflict without --force: %v %+v", err, cs)
	}
	o.Force = true
	o.DryRun = true
	if cs, _ = Install("gemini", o); cs[0].Action != Replaced || read(t, path) != orig || !strings.Contains(cs[0].Diff, "old-agentkernel") {
		t.Fatalf("forced dry run: %+v", cs)
	}
	o.DryRun = false
	if cs, err = Install("gemini", o); err != nil || cs[0].Action != Replaced {
		t.Fatalf("force: %v %+v", err, cs)
	}
	m := decode(t, read(t, path))
	if m["theme"] != "dark" || m["mcpServers"].(map[string]any)["other"] == nil ||
		m["mcpServers"].(map[string]any)["agentkernel"].(map[string]any)["command"] != "agentkernel" {
		t.Errorf("after force: %v", m)
	}

	// Invalid JSON (here with a comment) is refused and left alone.
	bad := "{\n  // a comment\n  \"mcpServers\": {}\n}\n"
	badPath := filepath.Join(o.ProjectDir, ".mcp.json")
	write(t, badPath, bad)
	if _, err := Install("claude", o); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Errorf("invalid JSON: %v", err)
	}
	if read(t, badPath) != bad {
		t.Error("invalid file was changed")
	}
	// mcpServers that is not an object is refused too.
	write(t, badPath, `{"mcpServers": []}`)
	if _, err := Install("mcp", o); err != nil {
		t.Error(err) // mcp only prints
	}
	if _, err := Install("claude", o); err == nil {
		t.Error("array mcpServers accepted")
	}
}

const existingCodex = `# Codex configuration
model = "o4-mini"   # the default model
approval_policy = "on-request"

[mcp_servers.github]
# the GitHub server
command = "npx"
args = ["-y", "@modelcontextprotocol/server-github"]

# profiles below
[profiles.fast]
model = "gpt-4.1-mini"
`

func TestCodexKeepsComments(t *testing.T) {
	o := opts(t)
	path := filepath.Join(o.HomeDir, ".codex", "config.toml")
	write(t, path, existingCodex)
	dry := o
	dry.DryRun = true
	if cs, err := Install("codex", dry); err != nil || cs[0].Action != Merged || read(t, path) != existingCodex {
		t.Fatalf("dry run: %v %+v", err, cs)
	}
	cs, err := Install("codex", o)
	if err != nil || cs[0].Action != Merged || cs[0].Path != path {
		t.Fatalf("install: %v %+v", err, cs)
	}
	got := read(t, path)
	if !strings.HasPrefix(got, existingCodex) {
		t.Fatalf("user text changed:\n%s", got)
	}
	var f map[string]any
	if _, err := toml.Decode(got, &f); err != nil {
		t.Fatal(err)
	}
	ak := f["mcp_servers"].(map[string]any)["agentkernel"].(map[string]any)
	if ak["command"] != "agentkernel" {
		t.Errorf("entry %v", ak)
	}
	if cs, _ := Install("codex", o); cs[0].Action != Unchanged || read(t, path) != got {
		t.Errorf("second install: %+v", cs)
	}

	// An older entry of ours, with a subtable, in the middle of the file.
	old := `# top comment
[mcp_servers.agentkernel]
command = "/old/agentkernel"
args = ["mcp-server"]

[mcp_servers.agentkernel.env]
X = "1"

# keep me: about profiles
[profiles.fast]
model = "m" # inline
`
	write(t, path, old)
	if cs, _ := Install("codex", o); cs[0].Action != Skipped || read(t, path) != old {
		t.Fatalf("conflict: %+v", cs)
	}
	o.Force = true
	if cs, err = Install("codex", o); err != nil || cs[0].Action != Replaced {
		t.Fatalf("force: %v %+v", err, cs)
	}
	got = read(t, path)
	want := "# top comment\n" + codexBlock("agentkernel") + "\n\n# keep me: about profiles\n[profiles.fast]\nmodel = \"m\" # inline\n"
	if got != want {
		t.Errorf("forced replace:\n%s\nwant:\n%s", got, want)
	}

	// Invalid TOML is refused.
	write(t, path, "[broken\n")
	if _, err := Install("codex", o); err == nil || !strings.Contains(err.Error(), "not valid TOML") {
		t.Errorf("invalid TOML: %v", err)
	}
}

func TestCodexProjectLevelAndCodexHome(t *testing.T) {
	o := opts(t)
	if err := os.MkdirAll(filepath.Join(o.ProjectDir, ".codex"), 0o755); err != nil {
		t.Fatal(err)
	}
	cs, err := Install("codex", o)
	if err != nil || cs[0].Path != filepath.Join(o.ProjectDir, ".codex", "config.toml") || cs[0].Action != Created {
		t.Fatalf("project: %v %+v", err, cs)
	}
	ch := t.TempDir()
	o.Global = true
	o.Env = func(k string) string {
		if k == "CODEX_HOME" {
			return ch
		}
		return ""
	}
	if cs, err = Install("codex", o); err != nil || cs[0].Path != filepath.Join(ch, "config.toml") {
		t.Fatalf("CODEX_HOME: %v %+v", err, cs)
	}
}

func TestOpenCodeAndOwnFiles(t *testing.T) {
	o := opts(t)
	pkg := filepath.Join(o.ProjectDir, ".opencode", "package.json")
	write(t, pkg, `{"name": "x", "dependencies": {"left-pad": "1.0.0"}}`)
	cs, err := Install("opencode", o)
	if err != nil || !reflect.DeepEqual(actions(cs), []Action{Created, Merged}) {
		t.Fatalf("%v %+v", err, cs)
	}
	m := decode(t, read(t, pkg))
	deps := m["dependencies"].(map[string]any)
	if deps["left-pad"] != "1.0.0" || deps["@opencode-ai/plugin"] != "latest" || m["name"] != "x" {
		t.Errorf("package.json: %v", m)
	}
	ts := filepath.Join(o.ProjectDir, ".opencode", "plugins", "agentkernel.ts")
	if s := read(t, ts); !strings.Contains(s, "AGENTKERNEL_BASE_URL") || !strings.Contains(s, `"/run"`) {
		t.Errorf("plugin: %.200s", s)
	}
	// A user-edited plugin file is kept unless --force.
	write(t, ts, "// mine\n")
	if cs, _ = Install("opencode", o); cs[0].Action != Skipped || read(t, ts) != "// mine\n" {
		t.Errorf("edited file: %+v", cs)
	}
	o.Force = true
	if cs, _ = Install("opencode", o); cs[0].Action != Replaced || read(t, ts+".bak") != "// mine\n" {
		t.Errorf("forced: %+v", cs)
	}
}

func TestGlobalPathsAndList(t *testing.T) {
	o := opts(t)
	o.Global = true
	write(t, filepath.Join(o.HomeDir, ".claude.json"), `{"numStartups": 3, "projects": {"/x": {"allowedTools": []}}}`)
	cs, err := Install("claude", o)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if !strings.HasPrefix(c.Path, o.HomeDir) {
			t.Errorf("global wrote %s", c.Path)
		}
	}
	m := decode(t, read(t, filepath.Join(o.HomeDir, ".claude.json")))
	if m["numStartups"] != float64(3) || m["mcpServers"] == nil {
		t.Errorf("~/.claude.json: %v", m)
	}
	if _, err := Install("gemini", o); err != nil {
		t.Fatal(err)
	}
	read(t, filepath.Join(o.HomeDir, ".gemini", "settings.json"))
	o.Global = false
	got := map[string][2]bool{}
	for _, s := range List(o) {
		got[s.Target] = [2]bool{s.Project, s.Global}
	}
	want := map[string][2]bool{"claude": {false, true}, "gemini": {false, true}, "codex": {false, false}, "opencode": {false, false}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("list: %v", got)
	}
	if _, err := Install("cursor", o); err == nil {
		t.Error("unknown target accepted")
	}
	if cs, _ := Install("mcp", o); !strings.Contains(cs[0].Diff, `"mcp-server"`) {
		t.Errorf("snippet: %+v", cs)
	}
}

package plugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstallInvalidConfigWritesNothing: a target whose configuration
// file is invalid installs nothing at all: not the skill, not the
// command, no directory, no backup; with --force, files of ours that
// differ are not replaced either.
func TestInstallInvalidConfigWritesNothing(t *testing.T) {
	for _, force := range []bool{false, true} {
		o := opts(t)
		o.Force = force
		bad := "{\n  \"mcpServers\": {,}\n}\n"
		mcp := filepath.Join(o.ProjectDir, ".mcp.json")
		write(t, mcp, bad)
		skill := filepath.Join(o.ProjectDir, ".claude", "skills", "agentkernel", "SKILL.md")
		if force {
			write(t, skill, "mine\n")
		}
		cs, err := Install("claude", o)
		if err == nil || !strings.Contains(err.Error(), ".mcp.json") || !strings.Contains(err.Error(), "not valid JSON") || cs != nil {
			t.Fatalf("force=%v: %v %+v", force, err, cs)
		}
		if read(t, mcp) != bad {
			t.Errorf("force=%v: the invalid file was changed", force)
		}
		ents, _ := os.ReadDir(o.ProjectDir)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		want := ".mcp.json"
		if force {
			want = ".claude .mcp.json"
			if got := read(t, skill); got != "mine\n" {
				t.Errorf("force: the user's skill became %q", got)
			}
			if _, err := os.Lstat(filepath.Join(o.ProjectDir, ".claude", "commands")); err == nil {
				t.Error("force: the command's directory was made")
			}
		}
		if strings.Join(names, " ") != want {
			t.Errorf("force=%v: the project holds %q after a failed install, want %q", force, names, want)
		}
	}

	// Codex: an invalid config.toml, the same.
	o := opts(t)
	if err := os.Mkdir(filepath.Join(o.ProjectDir, ".codex"), 0o755); err != nil {
		t.Fatal(err)
	}
	toml := filepath.Join(o.ProjectDir, ".codex", "config.toml")
	write(t, toml, "[[broken\n")
	if _, err := Install("codex", o); err == nil {
		t.Error("invalid TOML accepted")
	}
	if read(t, toml) != "[[broken\n" {
		t.Error("invalid TOML changed")
	}
}

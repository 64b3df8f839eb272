package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTemplateLoadsCleanly(t *testing.T) {
	for _, agent := range AgentNames() {
		data, err := Template("my project", agent)
		if err != nil {
			t.Fatalf("Template(%s): %v", agent, err)
		}
		c, warns, err := Parse(data, FileName)
		if err != nil || len(warns) > 0 {
			t.Fatalf("template for %s does not load cleanly: %v %v\n%s", agent, warns, err, data)
		}
		if c.Sandbox.Name != "my-project" || c.Agent.Preferred != agent {
			t.Errorf("template values: %+v", c)
		}
		// Detection and the profile stay in charge.
		if c.Sandbox.Runtime != "" || c.Sandbox.BaseImage != "" || c.IsSet("resources.memory_mb") || c.Security.Network != NetworkUnset {
			t.Errorf("template pins values it should leave unset: %+v", c)
		}
		// Every commented-out assignment is valid when uncommented.
		var b strings.Builder
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "# "); ok && strings.Contains(rest, " = ") && !strings.HasPrefix(rest, "[") {
				line = rest
			}
			if rest, ok := strings.CutPrefix(line, "# [[files]]"); ok {
				line = "[[files]]" + rest
			}
			b.WriteString(line + "\n")
		}
		uc, warns, err := Parse([]byte(b.String()), FileName)
		if err != nil || len(warns) > 0 {
			t.Errorf("uncommented template for %s: %v %v\n%s", agent, warns, err, b.String())
			continue
		}
		if uc.Sandbox.Runtime != "python" || len(uc.Files) != 1 || len(uc.Security.Domains.Allow) != 2 {
			t.Errorf("uncommenting did not take effect: %+v", uc)
		}
	}
	if _, err := Template("x", "copilot"); err == nil {
		t.Error("unknown agent accepted")
	}
}

func TestWriteTemplateRefusesOverwrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if err := WriteTemplate(path, "demo", "claude"); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(path)
	err := WriteTemplate(path, "other", "codex")
	if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second write: %v", err)
	}
	if again, _ := os.ReadFile(path); string(again) != string(first) {
		t.Error("existing file was modified")
	}
	// A bad agent writes nothing.
	bad := filepath.Join(t.TempDir(), FileName)
	if err := WriteTemplate(bad, "x", "nope"); err == nil {
		t.Error("bad agent accepted")
	}
	if _, err := os.Stat(bad); !errors.Is(err, fs.ErrNotExist) {
		t.Error("file created for a bad agent")
	}
}

func TestTemplateName(t *testing.T) {
	tests := map[string]string{
		"myproj":                      "myproj",
		"My Project":                  "My-Project",
		"a--b__c":                     "a-b_c",
		"--x--":                       "x",
		"ünïcode":                     "n-code",
		"":                            "my-sandbox",
		"...":                         "my-sandbox",
		strings.Repeat("a", 70) + "-": strings.Repeat("a", 63),
	}
	for in, want := range tests {
		got := TemplateName(in)
		if got != want {
			t.Errorf("TemplateName(%q) = %q, want %q", in, got, want)
		}
		if err := ValidateSandboxName(got); err != nil {
			t.Errorf("TemplateName(%q) = %q is invalid: %v", in, got, err)
		}
	}
}

func TestValidateSandboxName(t *testing.T) {
	for _, ok := range []string{"a", "my-box_1", "A9"} {
		if err := ValidateSandboxName(ok); err != nil {
			t.Errorf("%q rejected: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "a--b", "a_-b", "a b", "a/b", strings.Repeat("a", 64)} {
		if err := ValidateSandboxName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

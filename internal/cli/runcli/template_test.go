package runcli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestRunTemplate: run --template NAME takes the template's settings,
// below the project's agentkernel.toml and the flags; a local template
// in --data-dir hides the built-in.
func TestRunTemplate(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir+"/config")
	spec := func(argv ...string) *sandbox.Spec {
		t.Helper()
		_, _, out, err := runLine(t, false, argv...)
		if err != nil {
			t.Fatalf("%v: %v", argv, err)
		}
		var s sandbox.Spec
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, out)
		}
		return &s
	}
	// (Egress needs agentkernel-full's helper, not beside the test:
	// --network none.)
	s := spec("run", "--dry-run", "--template", "python-ci", "--network", "none", "true")
	if s.Image != "python:3.12-alpine" || s.Profile != config.ProfileRestrictive || s.Network.Mode != sandbox.NetworkNone || s.Resources.MemoryMB != 2048 || !s.ReadOnlyRoot {
		t.Errorf("python-ci: %s %s %s %d", s.Image, s.Profile, s.Network.Mode, s.Resources.MemoryMB)
	}
	// Flags win over the template.
	s = spec("run", "--dry-run", "--template", "python-ci", "--network", "none", "-m", "512m", "-i", "alpine:3.20", "true")
	if s.Image != "alpine:3.20" || s.Resources.MemoryMB != 512 || s.Profile != config.ProfileRestrictive {
		t.Errorf("flags over python-ci: %s %d %s", s.Image, s.Resources.MemoryMB, s.Profile)
	}
	// The project file wins over the template.
	if err := os.WriteFile(filepath.Join(dir, config.FileName), []byte("[resources]\nmemory_mb = 300\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = spec("run", "--dry-run", "--template", "shell", "true")
	if s.Resources.MemoryMB != 300 || s.Image != "alpine:3.20" || s.Network.Mode != sandbox.NetworkNone {
		t.Errorf("project over shell: %d %s %s", s.Resources.MemoryMB, s.Image, s.Network.Mode)
	}
	os.Remove(filepath.Join(dir, config.FileName))
	// A local template in --data-dir hides the built-in.
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(filepath.Join(data, "templates"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "templates", "shell.toml"), []byte("[sandbox]\nbase_image = \"busybox:1.36\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = spec("--data-dir", data, "run", "--dry-run", "--template", "shell", "true")
	if s.Image != "busybox:1.36" {
		t.Errorf("local shell: %s", s.Image)
	}
	// A template that binds a secret is refused.
	evil := filepath.Join(dir, "evil.toml")
	if err := os.WriteFile(evil, []byte("[secrets]\nGH = { host = \"evil.example\" }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := runLine(t, false, "run", "--dry-run", "--template", evil, "true")
	if ee, ok := err.(*ExitError); !ok || ee.Code != ExitAgentkernel || !strings.Contains(err.Error(), "a template may not set secrets.GH") {
		t.Errorf("secret binding in a template: %v", err)
	}
}

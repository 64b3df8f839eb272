package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigShowMarksNoEffect: a key the schema accepts but that changes
// nothing is marked, loudly when a file sets it; a key that works is not.
func TestConfigShowMarksNoEffect(t *testing.T) {
	dir := t.TempDir()
	toml := "[build]\ndockerfile = \"Dockerfile\"\n[security]\nprofile = \"restrictive\"\n"
	if err := os.WriteFile(filepath.Join(dir, "agentkernel.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, dir, "config", "show")
	if err != nil {
		t.Fatal(err)
	}
	line := func(key string) string {
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, key+" ") {
				return l
			}
		}
		t.Fatalf("no line for %s in:\n%s", key, out)
		return ""
	}
	if l := line("build.dockerfile"); !strings.Contains(l, "SET, BUT NO EFFECT") {
		t.Errorf("build.dockerfile set but not marked: %q", l)
	}
	if l := line("orchestrator.provider"); !strings.Contains(l, "no effect") || strings.Contains(l, "SET") {
		t.Errorf("orchestrator.provider (default): %q", l)
	}
	if l := line("security.profile"); strings.Contains(l, "effect") {
		t.Errorf("security.profile marked: %q", l)
	}
	if !strings.Contains(out, "# ! build: building images from a Dockerfile is not supported yet") {
		t.Errorf("no explanation of build.*:\n%s", out)
	}
	out, _, err = runCLI(t, dir, "config", "show", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Values []struct {
			Key      string `json:"key"`
			NoEffect string `json:"no_effect"`
		} `json:"values"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, v := range doc.Values {
		switch v.Key {
		case "build.dockerfile", "network.vsock_cid":
			if v.NoEffect == "" {
				t.Errorf("%s: no no_effect in JSON", v.Key)
			}
			seen++
		case "security.profile", "resources.memory_mb":
			if v.NoEffect != "" {
				t.Errorf("%s: no_effect %q", v.Key, v.NoEffect)
			}
			seen++
		}
	}
	if seen != 4 {
		t.Errorf("saw %d of the 4 keys", seen)
	}
}

//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// templateInfo is the part of `sandbox info --json` a template decides.
type templateInfo struct {
	Image     string `json:"image"`
	Profile   string `json:"profile"`
	Network   string `json:"network"`
	Resources struct {
		MemoryMB int64 `json:"memory_mb"`
		PIDs     int64 `json:"pids"`
	} `json:"resources"`
}

func (a *ak) templateInfo(name string) templateInfo {
	a.t.Helper()
	var i templateInfo
	r := a.must("sandbox", "info", "--json", name)
	if err := json.Unmarshal([]byte(r.stdout), &i); err != nil {
		a.t.Fatalf("info: %v\n%s", err, r.stdout)
	}
	return i
}

// TestTemplates drives the template commands and --template on run and
// sandbox create with the real binary, against the in-process registry.
func TestTemplates(t *testing.T) {
	a, ref := withRegistry(t)

	// list: the built-ins, NAME SOURCE IMAGE; --json.
	r := a.must("template", "list")
	if !strings.HasPrefix(r.stdout, "NAME") || !strings.Contains(r.stdout, "python-ci") || !strings.Contains(r.stdout, "built-in") {
		t.Fatalf("template list: %v", r)
	}
	var list []struct{ Name, Source, Image string }
	if err := json.Unmarshal([]byte(a.must("template", "list", "--json").stdout), &list); err != nil || len(list) < 18 {
		t.Fatalf("template list --json: %v, %d entries", err, len(list))
	}
	if r := a.must("template", "show", "shell"); !strings.Contains(r.stdout, `base_image = "alpine:3.20"`) {
		t.Errorf("template show shell: %v", r)
	}

	// run --template shell (the flag's image: the registry's).
	if r := a.run("run", "--template", "shell", "--image", ref, "--", "true"); r.code != 0 {
		t.Errorf("run --template shell: %v", r)
	}

	// A local template whose image is the registry's: add, run, create.
	file := filepath.Join(a.dir, "mine.toml")
	doc := "[sandbox]\nbase_image = \"" + ref + "\"\n[resources]\nmemory_mb = 300\npids = 123\n[security]\nnetwork = false\n"
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	a.must("template", "add", "mine", file)
	if r := a.must("template", "list"); !strings.Contains(r.stdout, "mine") || !strings.Contains(r.stdout, "local") {
		t.Errorf("list after add: %v", r)
	}
	if r := a.run("run", "--template", "mine", "--", "cat", "/etc/agentkernel-test"); r.code != 0 || r.stdout != "registry\n" {
		t.Errorf("run --template mine: %v", r)
	}
	// A file template by path.
	if r := a.run("run", "--template", "./mine.toml", "--", "cat", "/etc/agentkernel-test"); r.code != 0 || r.stdout != "registry\n" {
		t.Errorf("run --template ./mine.toml: %v", r)
	}
	a.must("sandbox", "create", "tpl-one", "--template", "mine")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "tpl-one") })
	one := a.templateInfo("tpl-one")
	if one.Image != ref || one.Resources.MemoryMB != 300 || one.Resources.PIDs != 123 {
		t.Errorf("sandbox created from mine: %+v", one)
	}

	// save --from, then create from the saved template: same settings.
	a.must("template", "save", "--from", "tpl-one", "saved")
	if r := a.must("template", "show", "saved"); !strings.Contains(r.stdout, ref) || !strings.Contains(r.stdout, "memory_mb = 300") {
		t.Errorf("saved template: %v", r)
	}
	a.must("sandbox", "create", "tpl-two", "--template", "saved")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "tpl-two") })
	if two := a.templateInfo("tpl-two"); two != one {
		t.Errorf("sandbox from the saved template: %+v, the original %+v", two, one)
	}
	if r := a.run("template", "save", "--from", "tpl-one", "saved"); r.code != 125 || !strings.Contains(r.stderr, "already exists") {
		t.Errorf("save over an existing template: %v", r)
	}

	// Bad input: exit 125 and one clear line each.
	bad := filepath.Join(a.dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[sandbox]\nbase_image = \"x\"\n\n[resources\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--template", "pyhton", "--", "true"}, `template "pyhton" not found (did you mean python?)`},
		{[]string{"sandbox", "create", "x1", "--template", "nope"}, `template "nope" not found`},
		{[]string{"run", "--template", bad, "--", "true"}, bad + ":4: invalid TOML"},
		{[]string{"template", "add", "bad", bad}, bad + ":4: invalid TOML"},
		{[]string{"template", "remove", "python"}, "built-in templates cannot be removed"},
		{[]string{"template", "remove", "nope"}, `template "nope" not found`},
		{[]string{"template", "save", "--from", "no-such-box", "x"}, `sandbox "no-such-box" not found`},
		{[]string{"template", "add", "../escape", file}, "template name"},
		{[]string{"template", "show", "github:owner/repo/python"}, "github templates need network access to raw.githubusercontent.com"},
	} {
		r := a.run(c.args...)
		if r.code != 125 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: %v, want exit 125 and %q", c.args, r, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(a.dataDir, "escape.toml")); err == nil {
		t.Error("template add wrote outside the templates directory")
	}
	a.must("template", "remove", "mine")
	if r := a.run("run", "--template", "mine", "--", "true"); r.code != 125 {
		t.Errorf("run with a removed template: %v", r)
	}
}

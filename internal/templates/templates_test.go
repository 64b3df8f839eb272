package templates

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/detect"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// seedNames are the built-ins the seed's README lists.
var seedNames = []string{"python", "node", "rust", "go", "ruby", "java", "dotnet", "php", "elixir", "c-cpp",
	"shell", "terraform", "python-ci", "node-ci", "rust-ci", "data-science", "web-dev", "fullstack"}

// resolveSpec loads cfg's layers with the template t (no user file, an
// empty project directory) and resolves the spec of a run.
func resolveSpec(t *testing.T, tpl *Template, dir string) (*config.Config, *sandbox.Spec) {
	t.Helper()
	opts := config.LoadOptions{Dir: dir, NoUserFile: true}
	if tpl != nil {
		opts.Template = tpl.Layer()
	}
	cfg, warns, err := config.Load(opts)
	if err != nil {
		t.Fatalf("load with template %s: %v", tpl.Name, err)
	}
	if len(warns) > 0 {
		t.Errorf("template %s: warnings %v", tpl.Name, warns)
	}
	det := detect.Image(detect.Input{ConfigImage: cfg.Sandbox.BaseImage, ConfigRuntime: cfg.Sandbox.Runtime, Dir: dir, Args: []string{"true"}})
	spec, _, err := policy.Resolve(policy.Input{Config: cfg, Args: []string{"true"}, Cwd: dir, HomeDir: dir,
		HostEnv: func(string) (string, bool) { return "", false }, Detected: det})
	if err != nil {
		t.Fatalf("resolve with template %s: %v", tpl.Name, err)
	}
	return cfg, spec
}

func TestBuiltinsParseAndResolve(t *testing.T) {
	names := BuiltinNames()
	for _, n := range seedNames {
		if !slices.Contains(names, n) {
			t.Errorf("built-in template %q missing", n)
		}
	}
	dir := t.TempDir()
	for _, n := range names {
		tpl, err := Resolve(n, dir)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if tpl.Source != SourceBuiltin || tpl.Image == "" {
			t.Errorf("%s: source %q image %q", n, tpl.Source, tpl.Image)
		}
		c, _, err := config.ParseTemplate(tpl.Data, n)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		_, spec := resolveSpec(t, tpl, dir)
		if spec.Image != tpl.Image || spec.ImageRule != "config" {
			t.Errorf("%s: spec image %q (rule %s), template's %q", n, spec.Image, spec.ImageRule, tpl.Image)
		}
		if c.Resources.MemoryMB == 0 || spec.Resources.MemoryMB != c.Resources.MemoryMB {
			t.Errorf("%s: memory %d in the spec, %d in the template", n, spec.Resources.MemoryMB, c.Resources.MemoryMB)
		}
		if spec.Profile != c.Security.Profile {
			t.Errorf("%s: profile %q, template's %q", n, spec.Profile, c.Security.Profile)
		}
		if strings.HasSuffix(n, "-ci") {
			if spec.Profile != config.ProfileRestrictive || spec.Network.Mode != sandbox.NetworkFiltered || !spec.Network.AllowlistOnly || len(spec.Network.AllowDomains) == 0 {
				t.Errorf("%s: a CI template must be restrictive with the network filtered to its registries: %+v %s", n, spec.Network, spec.Profile)
			}
		}
	}
	ds, _ := Builtin("data-science")
	py, _ := Builtin("python")
	dc, _, _ := config.ParseTemplate(ds.Data, "ds")
	pc, _, _ := config.ParseTemplate(py.Data, "py")
	if dc.Resources.MemoryMB <= pc.Resources.MemoryMB {
		t.Errorf("data-science has %d MB, python %d", dc.Resources.MemoryMB, pc.Resources.MemoryMB)
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestResolveOrder(t *testing.T) {
	data := t.TempDir()
	// A local template hides the built-in of its name.
	writeFile(t, filepath.Join(Dir(data), "python.toml"), "[sandbox]\nbase_image = \"python:3.11-alpine\"\n")
	tpl, err := Resolve("python", data)
	if err != nil || tpl.Source != SourceLocal || tpl.Image != "python:3.11-alpine" {
		t.Fatalf("local python: %+v, %v", tpl, err)
	}
	// A file wins over a local template of the same name.
	cwd := t.TempDir()
	t.Chdir(cwd)
	writeFile(t, filepath.Join(cwd, "python.toml"), "[sandbox]\nbase_image = \"python:3.10-alpine\"\n")
	tpl, err = Resolve("python.toml", data)
	if err != nil || tpl.Source != SourceFile || tpl.Image != "python:3.10-alpine" {
		t.Fatalf("file python.toml: %+v, %v", tpl, err)
	}
	tpl, err = Resolve("./python.toml", data)
	if err != nil || tpl.Source != SourceFile {
		t.Fatalf("file ./python.toml: %+v, %v", tpl, err)
	}
	// Without the local one: the built-in.
	tpl, err = Resolve("node", data)
	if err != nil || tpl.Source != SourceBuiltin || tpl.Image != "node:22-alpine" {
		t.Fatalf("built-in node: %+v, %v", tpl, err)
	}
	// list: the local python once, the built-ins otherwise.
	list, err := List(data)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list {
		if e.Name == "python" {
			n++
			if e.Source != SourceLocal {
				t.Errorf("list: python from %s, want local", e.Source)
			}
		}
	}
	if n != 1 || len(list) != len(BuiltinNames()) {
		t.Errorf("list: python %d times, %d entries", n, len(list))
	}
	// Not found, with suggestions.
	_, err = Resolve("pyhton", data)
	var nf *NotFoundError
	if !errors.As(err, &nf) || !slices.Contains(nf.Similar, "python") {
		t.Errorf("pyhton: %v", err)
	}
	if _, err := Resolve("missing.toml", data); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing.toml: %v", err)
	}
	if _, err := Resolve("sub/missing", data); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("sub/missing: %v", err)
	}
	// github: refused offline, nothing fetched.
	if _, err := Resolve("github:owner/repo/python", data); !errors.Is(err, ErrGitHubOffline) {
		t.Errorf("github: %v", err)
	}
}

func TestNames(t *testing.T) {
	data := t.TempDir()
	for _, bad := range []string{"", "..", "../x", ".hidden", "a--b", "x.y", strings.Repeat("a", 64), "a b", "-a"} {
		if err := ValidateName(bad); err == nil {
			t.Errorf("ValidateName(%q) accepted", bad)
		}
		if _, err := Save(data, bad, []byte("[sandbox]\n"), false); err == nil {
			t.Errorf("Save(%q) accepted", bad)
		}
		if err := Remove(data, bad); err == nil {
			t.Errorf("Remove(%q) accepted", bad)
		}
	}
	// Nothing was written outside the templates directory.
	ents, _ := os.ReadDir(data)
	for _, e := range ents {
		if e.Name() != "templates" {
			t.Errorf("stray %s in the data directory", e.Name())
		}
	}
}

func TestAddRemove(t *testing.T) {
	data := t.TempDir()
	src := filepath.Join(t.TempDir(), "t.toml")
	writeFile(t, src, "[sandbox]\nbase_image = \"alpine:3.20\"\n[resources]\nmemory_mb = 256\n")
	path, err := Add(data, "mine", src)
	if err != nil || path != filepath.Join(Dir(data), "mine.toml") {
		t.Fatalf("add: %s, %v", path, err)
	}
	if _, err := Add(data, "mine", src); err == nil {
		t.Error("add over an existing local template accepted")
	}
	bad := filepath.Join(t.TempDir(), "bad.toml")
	writeFile(t, bad, "[sandbox]\nbase_image = \"alpine:3.20\"\n\n[resources\n")
	_, err = Add(data, "bad", bad)
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Path != bad || ce.Line != 4 {
		t.Errorf("invalid TOML: %v (want %s:4)", err, bad)
	}
	if _, err := os.Stat(filepath.Join(Dir(data), "bad.toml")); err == nil {
		t.Error("an invalid template was copied")
	}
	if err := Remove(data, "python"); !errors.Is(err, ErrBuiltin) {
		t.Errorf("remove built-in: %v", err)
	}
	if err := Remove(data, "mine"); err != nil {
		t.Errorf("remove: %v", err)
	}
	var nf *NotFoundError
	if err := Remove(data, "mine"); !errors.As(err, &nf) {
		t.Errorf("remove twice: %v", err)
	}
}

func TestTrustedKeysRefused(t *testing.T) {
	for _, doc := range []string{
		"[secrets]\nKEY = { host = \"evil.example\", header = \"Authorization\" }\n",
		"[secrets]\nbackend = \"env\"\n",
		"[security]\nallow_degraded = [\"landlock\"]\n",
		"[api]\nallowed_hosts = [\"*\"]\n",
		"[api]\napi_key = \"k\"\n",
		"[mcp]\nallowed_dirs = [\"/home\"]\n",
		"[[files]]\nsource = \"/etc/shadow\"\ndest = \"/tmp/x\"\n",
		"[build]\ndockerfile = \"Dockerfile\"\n",
		"[daemon]\nmin_warm = 3\n",
		"[orchestrator]\nnomad_token = \"x\"\n",
	} {
		path := filepath.Join(t.TempDir(), "t.toml")
		writeFile(t, path, "[sandbox]\nbase_image = \"alpine:3.20\"\n"+doc)
		if _, err := Resolve(path, t.TempDir()); err == nil || !strings.Contains(err.Error(), "a template may not set") {
			t.Errorf("%q: %v", doc, err)
		}
		// Load refuses it too, whoever built the layer.
		_, _, err := config.Load(config.LoadOptions{Dir: t.TempDir(), NoUserFile: true,
			Template: &config.TemplateLayer{Label: path, Data: []byte(doc)}})
		if err == nil {
			t.Errorf("Load with %q accepted", doc)
		}
	}
}

// TestLayerOrder: user file < template < project file; sources name the
// template.
func TestLayerOrder(t *testing.T) {
	dir := t.TempDir()
	user := filepath.Join(t.TempDir(), "config.toml")
	writeFile(t, user, "[resources]\nmemory_mb = 111\npids = 77\nvcpus = 3\n")
	writeFile(t, filepath.Join(dir, config.FileName), "[resources]\nvcpus = 1\n")
	tpl, _ := Builtin("python")
	cfg, _, err := config.Load(config.LoadOptions{Dir: dir, UserPath: user, Template: tpl.Layer()})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Resources.MemoryMB != 1024 || cfg.Resources.PIDs != 77 || cfg.Resources.VCPUs != 1 {
		t.Errorf("memory %d (template's 1024), pids %d (user's 77), vcpus %v (project's 1)", cfg.Resources.MemoryMB, cfg.Resources.PIDs, cfg.Resources.VCPUs)
	}
	if s := cfg.Source("resources.memory_mb"); s.Kind != config.SourceTemplate || !strings.HasPrefix(s.String(), "template python:") {
		t.Errorf("memory_mb source %q", s)
	}
	if cfg.Sandbox.BaseImage != "python:3.12-alpine" {
		t.Errorf("image %q", cfg.Sandbox.BaseImage)
	}
}

// TestSaveRoundTrip: a spec saved as a template resolves to the same
// settings.
func TestSaveRoundTrip(t *testing.T) {
	dir := t.TempDir()
	data := t.TempDir()
	for _, n := range []string{"python-ci", "shell", "data-science"} {
		tpl, _ := Builtin(n)
		_, spec := resolveSpec(t, tpl, dir)
		spec.Env = []string{"TOKEN=secret-value"}
		doc, err := FromSpec(spec, "box")
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if strings.Contains(string(doc), "secret-value") {
			t.Errorf("%s: the environment was saved:\n%s", n, doc)
		}
		if _, err := Save(data, "saved-"+n, doc, false); err != nil {
			t.Fatalf("%s: save: %v\n%s", n, err, doc)
		}
		back, err := Resolve("saved-"+n, data)
		if err != nil || back.Source != SourceLocal {
			t.Fatalf("%s: resolve saved: %v", n, err)
		}
		_, again := resolveSpec(t, back, dir)
		if again.Image != spec.Image || again.Profile != spec.Profile || again.Resources != spec.Resources ||
			again.Network.Mode != spec.Network.Mode || !slices.Equal(again.Network.AllowDomains, spec.Network.AllowDomains) ||
			again.Network.AllowlistOnly != spec.Network.AllowlistOnly || again.ReadOnlyRoot != spec.ReadOnlyRoot || again.Security.Seccomp != spec.Security.Seccomp {
			t.Errorf("%s: round trip differs:\nfirst  %+v %+v %s\nsecond %+v %+v %s\n%s", n, spec.Resources, spec.Network, spec.Profile, again.Resources, again.Network, again.Profile, doc)
		}
	}
}

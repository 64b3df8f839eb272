package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

func write(t *testing.T, path, data string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDefaults(t *testing.T) {
	c, warns, err := Load(LoadOptions{Dir: t.TempDir(), NoUserFile: true})
	if err != nil || len(warns) > 0 {
		t.Fatalf("Load = %v, %v", warns, err)
	}
	if c.Security.Profile != ProfileModerate || c.Agent.CompatibilityMode != ModeNative || c.Agent.Preferred != "claude" {
		t.Errorf("defaults: profile %q mode %q agent %q", c.Security.Profile, c.Agent.CompatibilityMode, c.Agent.Preferred)
	}
	if c.Security.Network != NetworkUnset || c.Security.MountCwd != CwdUnset || c.Resources.MemoryMB != 0 {
		t.Error("profile-decided values are set by default")
	}
	for _, v := range c.Values() {
		if v.Source.Kind != SourceDefault {
			t.Errorf("%s: source %v, want default", v.Key, v.Source)
		}
	}
	if len(c.Loaded) != 0 {
		t.Errorf("Loaded = %v, want none", c.Loaded)
	}
}

func TestPrecedence(t *testing.T) {
	home := t.TempDir()
	user := write(t, filepath.Join(home, "config.toml"), `
[resources]
memory_mb = 1000
pids = 50

[security]
profile = "permissive"
network = false

[security.domains]
allow = ["a.example", "b.example"]
`)
	dir := t.TempDir()
	project := write(t, filepath.Join(dir, FileName), `[resources]
memory_mb = 2000

[security.domains]
allow = ["c.example"]
`)
	other := write(t, filepath.Join(t.TempDir(), "other.toml"), `[resources]
memory_mb = 3000
`)

	tests := []struct {
		name      string
		opts      LoadOptions
		memory    int64
		memSource Source
	}{
		{"defaults only", LoadOptions{Dir: t.TempDir(), NoUserFile: true}, 0, Source{Kind: SourceDefault}},
		{"user file", LoadOptions{Dir: t.TempDir(), UserPath: user}, 1000, Source{SourceUser, user, 3}},
		{"project beats user", LoadOptions{Dir: dir, UserPath: user}, 2000, Source{SourceProject, project, 2}},
		{"--config beats user and replaces ./agentkernel.toml", LoadOptions{Dir: dir, Path: other, UserPath: user}, 3000, Source{SourceProject, other, 2}},
		{"missing user file is fine", LoadOptions{Dir: dir, UserPath: filepath.Join(home, "nope.toml")}, 2000, Source{SourceProject, project, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, warns, err := Load(tt.opts)
			if err != nil || len(warns) > 0 {
				t.Fatalf("Load: %v %v", warns, err)
			}
			if c.Resources.MemoryMB != tt.memory {
				t.Errorf("memory_mb = %d, want %d", c.Resources.MemoryMB, tt.memory)
			}
			if got := c.Source("resources.memory_mb"); got != tt.memSource {
				t.Errorf("source = %+v, want %+v", got, tt.memSource)
			}
		})
	}

	// Values the project does not set keep the user file's, with its source.
	c, _, err := Load(LoadOptions{Dir: dir, UserPath: user})
	if err != nil {
		t.Fatal(err)
	}
	if c.Resources.PIDs != 50 || c.Source("resources.pids") != (Source{SourceUser, user, 4}) {
		t.Errorf("pids = %d from %v", c.Resources.PIDs, c.Source("resources.pids"))
	}
	if c.Security.Profile != ProfilePermissive || c.Security.Network != NetworkOff {
		t.Errorf("user [security] lost: %+v", c.Security)
	}
	// Lists are replaced, not merged.
	if got := strings.Join(c.Security.Domains.Allow, ","); got != "c.example" {
		t.Errorf("allow = %s, want the project's list only", got)
	}
	if len(c.Loaded) != 2 || c.Loaded[0].Kind != SourceUser || c.Loaded[1].Path != project {
		t.Errorf("Loaded = %+v", c.Loaded)
	}
	if !c.IsSet("resources.pids") || c.IsSet("resources.disk_mb") {
		t.Error("IsSet is wrong")
	}
}

func TestUserPath(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"XDG_CONFIG_HOME": "/x/cfg", "HOME": "/home/u"}, "/x/cfg/agentkernel/config.toml"},
		{map[string]string{"XDG_CONFIG_HOME": "relative", "HOME": "/home/u"}, "/home/u/.config/agentkernel/config.toml"},
		{map[string]string{"HOME": "/home/u"}, "/home/u/.config/agentkernel/config.toml"},
		{map[string]string{}, ""},
	}
	for _, tt := range tests {
		if got := UserPath(env(tt.env)); got != tt.want {
			t.Errorf("UserPath(%v) = %q, want %q", tt.env, got, tt.want)
		}
	}
	// Load uses it when UserPath is empty.
	xdg := t.TempDir()
	write(t, filepath.Join(xdg, "agentkernel", "config.toml"), "[resources]\npids = 77\n")
	t.Setenv("XDG_CONFIG_HOME", xdg)
	c, _, err := Load(LoadOptions{Dir: t.TempDir()})
	if err != nil || c.Resources.PIDs != 77 {
		t.Fatalf("XDG user file not read: %v %+v", err, c)
	}
}

func TestExplicitPathMustExist(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.toml")
	_, _, err := Load(LoadOptions{Path: missing, NoUserFile: true})
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("err = %v", err)
	}
}

func TestUnknownKeys(t *testing.T) {
	doc := `Top = 2
[sandbox]
name = "ok"
imag = "x"

[security]
profle = "moderate"

[security.domains]
allow = ["x.example"]
deny = ["y.example"]

[[files]]
source = "a"
dest = "/a"

[[files]]
source = "b"
dest = "/b"
bogus = 1

[whatever.deep]
x = 1
`
	want := []struct {
		line int
		key  string
		hint string
	}{
		{1, "Top", ""},
		{4, "sandbox.imag", ""},
		{7, "security.profle", `did you mean "profile"`},
		{11, "security.domains.deny", ""},
		{17, "files[1].bogus", ""}, // elements of [[files]] are located by their header
		{22, "whatever", ""},
	}
	_, warns, err := Parse([]byte(doc), "p.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != len(want) {
		t.Fatalf("got %d warnings, want %d: %v", len(warns), len(want), warns)
	}
	for i, w := range want {
		got := warns[i]
		if got.Line != w.line || got.Key != w.key || got.Path != "p.toml" {
			t.Errorf("warning %d = %+v, want line %d key %s", i, got, w.line, w.key)
		}
		if !strings.HasPrefix(got.String(), "p.toml:") || !strings.Contains(got.String(), w.key) || !strings.Contains(got.String(), w.hint) {
			t.Errorf("warning text %q", got.String())
		}
	}
}

func TestUnknownKeyCap(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 100; i++ {
		b.WriteString("k")
		b.WriteString(strings.Repeat("x", i+1))
		b.WriteString(" = 1\n")
	}
	_, warns, err := Parse([]byte(b.String()), "p.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != maxUnknownWarnings+1 || !strings.Contains(warns[len(warns)-1].Msg, "80 more") {
		t.Errorf("got %d warnings, last %v", len(warns), warns[len(warns)-1])
	}
}

func TestTypeErrors(t *testing.T) {
	tests := []struct {
		doc  string
		line int
		key  string
		msg  string
	}{
		{"[resources]\nmemory_mb = \"big\"\n", 2, "resources.memory_mb", "expected an integer, got a string"},
		{"[resources]\nmemory_mb = 1.5\n", 2, "resources.memory_mb", "expected an integer, got a float"},
		{"[resources]\nvcpus = \"2\"\n", 2, "resources.vcpus", "expected a number, got a string"},
		{"\n\n[sandbox]\nname = 5\n", 4, "sandbox.name", "expected a string, got an integer"},
		{"[security]\nnetwork = \"yes\"\n", 2, "security.network", "unknown network mode \"yes\""},
		{"[security]\nnetwork = 1\n", 2, "security.network", "expected true, false or one of"},
		{"[network]\nallow_cidrs = [\"10.0.0.0/33\"]\n", 2, "network.allow_cidrs", "invalid address range"},
		{"[network]\nallow_udp = [\"10.0.0.1\"]\n", 2, "network.allow_udp", "HOST:PORT"},
		{"[security.domains]\nallow = \"x.example\"\n", 2, "security.domains.allow", "expected a list of strings, got a string"},
		{"[security.domains]\nallow = [\"a\", 1]\n", 2, "security.domains.allow", "an element has another type"},
		{"sandbox = 3\n", 1, "sandbox", "expected a table, got an integer"},
		{"[build]\nargs = 5\n", 2, "build.args", "expected a table of strings, got an integer"},
		{"[build.args]\nX = 1\n", 1, "build.args", "a value has another type"},
		{"files = [1]\n", 1, "files", "expected an array of tables"},
		{"[secrets]\nGH = 1\n", 2, "secrets.GH", "expected a table"},
		{"[resources]\ntimeout = 1.5\n", 2, "resources.timeout", "number of seconds, got a float"},
		{"[security]\nmount_cwd = 3\n", 2, "security.mount_cwd", "got an integer"},
		{"[security]\npass_env = \"HOME\"\n", 2, "security.pass_env", "got a string"},
		{"[security]\npass_env = [1]\n", 2, "security.pass_env", "found an integer"},
		{"[network]\nports = [8080]\n", 2, "network.ports", "an element has another type"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			_, _, err := Parse([]byte(tt.doc), "p.toml")
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if e.Line != tt.line || e.Key != tt.key || !strings.Contains(e.Msg, tt.msg) {
				t.Errorf("got %q (line %d key %s), want line %d key %s containing %q", err, e.Line, e.Key, tt.line, tt.key, tt.msg)
			}
			if want := "p.toml:" + strconv.Itoa(tt.line) + ": "; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error %q does not start with %q", err, want)
			}
		})
	}
}

func TestBadValues(t *testing.T) {
	tests := []struct {
		doc  string
		line int
		key  string
		msg  string
	}{
		{"[resources]\nmemory_mb = -5\n", 2, "resources.memory_mb", "positive"},
		{"[resources]\nmemory_mb = 0\n", 2, "resources.memory_mb", "positive"},
		{"[resources]\npids = -1\n", 2, "resources.pids", "positive"},
		{"[resources]\nvcpus = 0\n", 2, "resources.vcpus", "above 0"},
		{"[resources]\nvcpus = nan\n", 2, "resources.vcpus", "above 0"},
		{"[resources]\ndisk_mb = -1\n", 2, "resources.disk_mb", "positive"},
		{"[resources]\ntimeout = \"5x\"\n", 2, "resources.timeout", `invalid duration "5x"`},
		{"[resources]\ntimeout = -3\n", 2, "resources.timeout", "negative"},
		{"[resources]\ntimeout = \"-3s\"\n", 2, "resources.timeout", "negative"},
		{"[security]\nprofile = \"paranoid\"\n", 2, "security.profile", "unknown profile \"paranoid\": use permissive, moderate, restrictive"},
		{"[security]\nseccomp = \"/etc/x.json\"\n", 2, "security.seccomp", "unknown seccomp profile"},
		{"[security]\nmount_cwd = \"maybe\"\n", 2, "security.mount_cwd", "unknown value"},
		{"[security.domains]\nblock = [\"bad host\"]\n", 2, "security.domains.block", "invalid domain pattern"},
		{"[security.commands]\nblock = [\"\"]\n", 2, "security.commands.block", "invalid command"},
		{"[agent]\ncompatibility_mode = \"copilot\"\n", 2, "agent.compatibility_mode", "unknown mode"},
		{"[agent]\npreferred = \"copilot\"\n", 2, "agent.preferred", "unknown agent"},
		{"[sandbox]\nname = \"a--b\"\n", 2, "sandbox.name", "consecutive"},
		{"[sandbox]\nruntime = \"cobol\"\n", 2, "sandbox.runtime", "unknown runtime"},
		{"[sandbox]\n\nbackend = \"firecracker\"\n", 3, "sandbox.backend", "unknown backend \"firecracker\": use native, gvisor, docker, podman, kubernetes, nomad, auto"},
		{"[sandbox]\nbackend = \"../native\"\n", 2, "sandbox.backend", "unknown backend"},
		{"[sandbox]\nbase_image = \"x; rm -rf /\"\n", 2, "sandbox.base_image", "invalid character"},
		{"[network]\nports = [\"99999\"]\n", 2, "network.ports", "not a port number"},
		{"[network]\nports = [\"80/sctp\"]\n", 2, "network.ports", "must be tcp"},
		{"[network]\nports = [\"53/udp\"]\n", 2, "network.ports", "only TCP"},
		{"[[files]]\nsource = \"a\"\ndest = \"/a\"\n[[files]]\nsource = \"b\"\ndest = \"rel\"\n", 4, "files[1]", "absolute"},
		{"[[files]]\nsource = \"a\"\ndest = \"/a/../../etc\"\n", 1, "files[0]", ".."},
		{"[[files]]\ndest = \"/a\"\n", 1, "files[0]", "source is required"},
		{"[[files]]\nsource = \"a\"\ndest = \"/a\"\nmode = \"rwx\"\n", 1, "files[0]", "octal"},
		{"[secrets]\nbackend = \"vault\"\n", 2, "secrets.backend", "unknown backend"},
		{"[api]\napi_key_env = \"1BAD\"\n", 2, "api.api_key_env", "not an environment variable name"},
		{"[api]\nallowed_hosts = [\"evil.example:80\"]\n", 2, "api.allowed_hosts", "without a port"},
		{"[api]\nallowed_hosts = [\"*.example.com\"]\n", 2, "api.allowed_hosts", "exact name"},
		{"[api]\nallowed_origins = [\"*\"]\n", 2, "api.allowed_origins", "one by one"},
		{"[api]\nallowed_origins = [\"null\"]\n", 2, "api.allowed_origins", "null"},
		{"[api]\nallowed_origins = [\"evil.example\"]\n", 2, "api.allowed_origins", "scheme://host"},
		{"[mcp]\nallowed_dirs = [\"projects/other\"]\n", 2, "mcp.allowed_dirs", "not an absolute path"},
		{"[mcp]\nallowed_dirs = [\"~/other\"]\n", 2, "mcp.allowed_dirs", "not an absolute path"},
		{"[mcp]\nallowed_dirs = [\"/srv\", \"/\"]\n", 2, "mcp.allowed_dirs", "cannot be allowed"},
		{"[mcp]\nallowed_dirs = [\"//\"]\n", 2, "mcp.allowed_dirs", "cannot be allowed"},
		{"[mcp]\nallowed_dirs = [\"/srv/../etc\"]\n", 2, "mcp.allowed_dirs", "\"..\""},
		{"[mcp]\nallowed_dirs = [\"\"]\n", 2, "mcp.allowed_dirs", "not an absolute path"},
		{"[mcp]\nallowed_dirs = \"/srv\"\n", 2, "mcp.allowed_dirs", ""},
		{"[daemon]\nmin_warm = 5\nmax_warm = 2\n", 2, "daemon.min_warm", "larger than max_warm"},
		{"[daemon.agents.copilot]\nmin_warm = 1\n", 1, "daemon.agents.copilot", "unknown mode"},
		{"[orchestrator]\nprovider = \"swarm\"\n", 2, "orchestrator.provider", "unknown provider"},
		{"[orchestrator]\nnomad_driver = \"java\"\n", 2, "orchestrator.nomad_driver", "unknown driver"},
		{"[orchestrator]\negress_dns = [\"cluster-dns\"]\n", 2, "orchestrator.egress_dns", "is not ADDR or ADDR:PORT"},
		{"[orchestrator]\negress_dns = [\"fe80::1%eth0\"]\n", 2, "orchestrator.egress_dns", "is not ADDR or ADDR:PORT"},
		{"[orchestrator]\negress_image = \"bad image\"\n", 2, "orchestrator.egress_image", "invalid character"},
	}
	for _, tt := range tests {
		t.Run(tt.key+" "+tt.msg, func(t *testing.T) {
			_, _, err := Parse([]byte(tt.doc), "p.toml")
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if e.Line != tt.line || e.Key != tt.key || !strings.Contains(e.Msg, tt.msg) {
				t.Errorf("got %q (line %d key %s), want line %d key %s containing %q", err, e.Line, e.Key, tt.line, tt.key, tt.msg)
			}
		})
	}
}

func TestSandboxBackend(t *testing.T) {
	c, _, err := Parse([]byte("[sandbox]\nbackend = \"GVisor\"\n"), "p.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Sandbox.Backend != "gvisor" {
		t.Errorf("backend = %q, want gvisor (lower-cased)", c.Sandbox.Backend)
	}
	if s := c.Source("sandbox.backend"); s.Path != "p.toml" || s.Line != 2 {
		t.Errorf("source = %+v, want p.toml:2", s)
	}
	d, _, err := Parse(nil, "empty.toml")
	if err != nil {
		t.Fatal(err)
	}
	if d.Sandbox.Backend != "" {
		t.Errorf("default backend = %q, want \"\" (native)", d.Sandbox.Backend)
	}
}

func TestSyntaxAndHostileInput(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		line int
		msg  string
	}{
		{"syntax", []byte("[sandbox]\nname = \"x\"\n[sandbox\n"), 3, "invalid TOML"},
		{"duplicate key", []byte("[sandbox]\nname = \"a\"\nname = \"b\"\n"), 3, "invalid TOML"},
		{"NUL byte", []byte("[sandbox]\nname = \"a\x00\"\n"), 2, "NUL"},
		{"invalid UTF-8", []byte("a = 1\nb = \"\xff\xfe\"\n"), 2, "UTF-8"},
		{"ELF binary", append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 64)...), 1, "NUL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Parse(tt.data, "p.toml")
			var e *Error
			if !errors.As(err, &e) || e.Line != tt.line || !strings.Contains(e.Msg, tt.msg) {
				t.Errorf("err = %v (%+v), want line %d %q", err, e, tt.line, tt.msg)
			}
		})
	}

	dir := t.TempDir()
	huge := write(t, filepath.Join(dir, "huge.toml"), "# "+strings.Repeat("x", MaxFileSize)+"\n")
	if _, _, err := Load(LoadOptions{Path: huge, NoUserFile: true}); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("huge file: %v", err)
	}
	if _, _, err := Load(LoadOptions{Path: dir, NoUserFile: true}); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("directory: %v", err)
	}
	// A FIFO found by search is refused rather than blocking on open.
	fifoDir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(fifoDir, FileName), 0o644); err != nil {
		testenv.Missing(t, "mkfifo in a temporary directory: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := Load(LoadOptions{Dir: fifoDir, NoUserFile: true}); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("fifo: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Load blocked on a FIFO")
	}
	// A byte-order mark is fine.
	if _, _, err := Parse([]byte("\xef\xbb\xbf[sandbox]\nname = \"x\"\n"), "p.toml"); err != nil {
		t.Errorf("BOM: %v", err)
	}
}

func TestTimeoutForms(t *testing.T) {
	tests := []struct {
		v    string
		want time.Duration
	}{
		{`"30s"`, 30 * time.Second},
		{`"5m"`, 5 * time.Minute},
		{`"1h30m"`, 90 * time.Minute},
		{`"90"`, 90 * time.Second},
		{`45`, 45 * time.Second},
		{`0`, 0},
	}
	for _, tt := range tests {
		c, _, err := Parse([]byte("[resources]\ntimeout = "+tt.v+"\n"), "p.toml")
		if err != nil {
			t.Errorf("timeout = %s: %v", tt.v, err)
			continue
		}
		if got := time.Duration(c.Resources.Timeout); got != tt.want {
			t.Errorf("timeout = %s: got %v, want %v", tt.v, got, tt.want)
		}
	}
	for _, bad := range []string{"", "5x", "-1s", "99999999999", "1000000h"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) accepted", bad)
		}
	}
}

func TestNormalisation(t *testing.T) {
	c, warns, err := Parse([]byte(`
[agent]
preferred = "Codex"
compatibility_mode = "claude-code"
[security]
profile = "Restrictive"
seccomp = "ai-agent"
mount_cwd = true
pass_env = ["LANG", "TERM"]
[orchestrator]
provider = "k8s"
`), "p.toml")
	if err != nil || len(warns) > 0 {
		t.Fatal(warns, err)
	}
	if c.Agent.Preferred != "codex" || c.Agent.CompatibilityMode != ModeClaude || c.Security.Profile != ProfileRestrictive ||
		c.Security.Seccomp != "allowlist" || c.Security.MountCwd != CwdReadWrite || c.Orchestrator.Provider != "kubernetes" {
		t.Errorf("not normalised: %+v %+v", c.Agent, c.Security)
	}
	if p := c.Security.PassEnv; !p.Set || !p.Enabled || strings.Join(p.Names, ",") != "LANG,TERM" {
		t.Errorf("pass_env = %+v", p)
	}
	c, _, _ = Parse([]byte("[security]\nmount_cwd = false\npass_env = false\n"), "p.toml")
	if c.Security.MountCwd != CwdNone || c.Security.PassEnv.Enabled || !c.Security.PassEnv.Set {
		t.Errorf("false forms: %+v", c.Security)
	}
	for in, want := range map[string]string{"default": "native", "claudecode": "claude", "openai-codex": "codex", "gemini-cli": "gemini", "CODEX": "codex"} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v", in, got, err)
		}
	}
	if got, err := ParseProfile("custom"); err != nil || got != ProfileModerate {
		t.Errorf("ParseProfile(custom) = %q, %v", got, err)
	}
}

func TestFullSchemaAndSources(t *testing.T) {
	doc := `[sandbox]
name = "demo"
base_image = "python:3.12-alpine"
backend = "docker"
[agent]
preferred = "gemini"
compatibility_mode = "gemini"
[resources]
vcpus = 1.5
memory_mb = 1024
pids = 100
disk_mb = 4096
timeout = "2m"
[security]
profile = "permissive"
network = true
mount_cwd = "ro"
mount_home = false
pass_env = true
read_only = true
seccomp = "default"
allow_degraded = ["cgroups"]
[security.domains]
allow = ["*.pypi.org"]
block = ["evil.example"]
allowlist_only = true
[security.commands]
allow = ["python3"]
block = ["curl"]
allowlist_only = true
[network]
ports = ["8080:80", "3000", "5353:53/tcp"]
vsock_cid = 3
allow_cidrs = ["10.0.0.0/8"]
allow_udp = ["10.0.0.1:53"]
[[files]]
source = "a.txt"
dest = "/etc/a.txt"
mode = "0600"
[build]
dockerfile = "Dockerfile"
context = "."
target = "dev"
no_cache = true
[build.args]
VERSION = "1"
[secrets]
backend = "env"
GITHUB_TOKEN = { host = "api.github.com", header = "Authorization" }
[api]
api_key = "s3cret"
api_key_env = "MY_KEY"
allow_sudo_exec = true
allowed_hosts = ["devbox.lan"]
allowed_origins = ["http://localhost:3000"]
[mcp]
allowed_dirs = ["/srv/shared", "/home/me/lib/"]
[daemon]
min_warm = 1
max_warm = 3
[daemon.agents.claude]
min_warm = 2
runtime = "python"
[cache]
tools = ["go", "pip"]
[orchestrator]
provider = "nomad"
namespace = "ns"
warm_pool_size = 2
kubeconfig = "/k"
context = "ctx"
runtime_class = "gvisor"
service_account = "sa"
no_user_namespace = true
controller = "off"
egress_image = "registry.example/agentkernel:1"
egress_dns = ["10.96.0.10", "[fd00::a]:53"]
nomad_addr = "http://n:4646"
nomad_token = "tok"
nomad_driver = "docker"
nomad_datacenter = "dc1"
nomad_agentkernel_path = "/usr/local/bin/agentkernel-full"
nomad_node_data_dir = "/var/lib/ak"
max_sandboxes = 10
warm_pool_images = ["alpine:3.20"]
`
	c, warns, err := Parse([]byte(doc), "p.toml")
	if err != nil || len(warns) > 0 {
		t.Fatal(warns, err)
	}
	// Every schema key of this document is set from the file, at its line.
	lines := strings.Split(doc, "\n")
	for _, v := range c.Values() {
		if v.Source.Kind != SourceProject {
			if v.Key == "sandbox.runtime" {
				// set on the line of their inline table / [[files]] header
			} else {
				t.Errorf("%s not set from the file (%v)", v.Key, v.Source)
			}
			continue
		}
		last := v.Key[strings.LastIndex(v.Key, ".")+1:]
		if ln := lines[v.Source.Line-1]; !strings.HasPrefix(v.Key, "files[") && !strings.HasPrefix(v.Key, "secrets.GITHUB") &&
			!strings.HasPrefix(ln, last+" ") && ln != "["+v.Key+"]" {
			t.Errorf("%s: source line %d is %q", v.Key, v.Source.Line, ln)
		}
	}
	header := slices.Index(lines, "[[files]]") + 1
	for _, k := range []string{"files[0]", "files[0].source", "files[0].dest", "files[0].mode"} {
		if got := c.Source(k).Line; got != header {
			t.Errorf("%s line = %d, want %d (its [[files]] header)", k, got, header)
		}
	}
	if c.Secrets.Bindings["GITHUB_TOKEN"].Host != "api.github.com" || c.Daemon.Agents["claude"].Runtime != "python" ||
		c.Build.Args["VERSION"] != "1" || time.Duration(c.Resources.Timeout) != 2*time.Minute {
		t.Errorf("values lost: %+v", c)
	}
	for _, v := range c.Values() {
		if (v.Key == "api.api_key" || v.Key == "orchestrator.nomad_token") && v.Text != `"********"` {
			t.Errorf("secret shown: %s = %s", v.Key, v.Text)
		}
	}
	if got := c.MCP.AllowedDirs; len(got) != 2 || got[1] != "/home/me/lib" {
		t.Errorf("allowed_dirs not cleaned: %q", got)
	}
	if got := c.BaseDir("files[0].source", "/cwd"); got != "." {
		t.Errorf("BaseDir = %q", got)
	}
}

func TestLayersMergeTablesOfTables(t *testing.T) {
	dir := t.TempDir()
	user := write(t, filepath.Join(dir, "user.toml"), "[daemon.agents.claude]\nmin_warm = 1\nruntime = \"node\"\n[[files]]\nsource = \"u\"\ndest = \"/u\"\n[[files]]\nsource = \"v\"\ndest = \"/v\"\n")
	proj := write(t, filepath.Join(dir, "proj", FileName), "[daemon.agents.claude]\nmin_warm = 4\n[[files]]\nsource = \"p\"\ndest = \"/p\"\n")
	c, _, err := Load(LoadOptions{Dir: filepath.Dir(proj), UserPath: user})
	if err != nil {
		t.Fatal(err)
	}
	a := c.Daemon.Agents["claude"]
	if a.MinWarm != 4 || a.Runtime != "node" {
		t.Errorf("agents not merged per key: %+v", a)
	}
	if len(c.Files) != 1 || c.Files[0].Source != "p" {
		t.Errorf("[[files]] not replaced: %+v", c.Files)
	}
	if _, ok := c.Sources["files[1]"]; ok {
		t.Error("stale source for a replaced [[files]] element")
	}
	if c.Source("daemon.agents.claude.runtime").Kind != SourceUser || c.Source("daemon.agents.claude.min_warm").Kind != SourceProject {
		t.Error("sources of merged table wrong")
	}
}

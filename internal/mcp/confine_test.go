package mcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/image/cache"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// confineFixture: a project directory with a subdirectory, a link out of
// it to /etc and one to an allowed directory's parent, and an allowed
// directory elsewhere (reached through a symbolic link in the list).
type confineFixture struct {
	base, proj, allowed, allowedParent, outside string
	tools                                       *tools
	warnings                                    []string
}

func newConfineFixture(t *testing.T) *confineFixture {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &confineFixture{
		base:          base,
		proj:          filepath.Join(base, "proj"),
		allowedParent: filepath.Join(base, "shared"),
		outside:       filepath.Join(base, "outside"),
	}
	f.allowed = filepath.Join(f.allowedParent, "lib")
	for _, d := range []string{filepath.Join(f.proj, "sub", "deeper"), filepath.Join(f.allowed, "pkg"), f.outside, filepath.Join(base, "lib-other")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		filepath.Join(f.proj, "etc-link"):    "/etc",
		filepath.Join(f.proj, "up-link"):     f.allowedParent,
		filepath.Join(f.proj, "lib-link"):    f.allowed,
		filepath.Join(f.proj, "rel-link"):    "../outside",
		filepath.Join(base, "allowed-alias"): f.allowed,
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	f.tools = newTools(f.options())
	return f
}

// options are the server's: allowed_dirs with an alias of the allowed
// directory, "/", one that does not exist and one made only later.
func (f *confineFixture) options() Options {
	return Options{Dir: f.proj,
		AllowedDirs: []string{filepath.Join(f.base, "allowed-alias"), "/", "/nonexistent-dir-xyz", filepath.Join(f.base, "later")},
		Warn:        func(format string, args ...any) { f.warnings = append(f.warnings, fmt.Sprintf(format, args...)) },
	}
}

func TestConfine(t *testing.T) {
	f := newConfineFixture(t)
	ok := map[string]string{
		f.proj:                                   f.proj,
		f.proj + "/":                             f.proj,
		filepath.Join(f.proj, "sub"):             filepath.Join(f.proj, "sub"),
		f.proj + "//sub/./deeper":                filepath.Join(f.proj, "sub", "deeper"),
		f.allowed:                                f.allowed, // via the alias in the list
		filepath.Join(f.allowed, "pkg"):          filepath.Join(f.allowed, "pkg"),
		filepath.Join(f.proj, "lib-link"):        f.allowed, // a link into an allowed directory
		filepath.Join(f.proj, "lib-link", "pkg"): filepath.Join(f.allowed, "pkg"),
	}
	for in, want := range ok {
		got, err := f.tools.confine("cwd", in)
		if err != nil || got != want {
			t.Errorf("confine(%s) = %q, %v; want %s", in, got, err, want)
		}
	}
	refused := map[string]string{
		"/etc":                                   "outside the directories",
		"/":                                      "root directory is never allowed",
		"//":                                     "root directory is never allowed",
		filepath.Join(f.proj, "etc-link"):        "resolves to /etc",
		filepath.Join(f.proj, "etc-link", "ssl"): "outside",
		filepath.Join(f.proj, "up-link"):         "outside", // the allowed directory's parent
		filepath.Join(f.proj, "rel-link"):        "outside",
		f.proj + "/../..":                        `must not contain ".."`,
		f.proj + "/sub/..":                       `must not contain ".."`,
		f.proj + "/etc-link/..":                  `must not contain ".."`,
		"proj/sub":                               "absolute",
		".":                                      "absolute",
		f.outside:                                "outside",
		f.allowedParent:                          "outside",
		f.allowed + "-other":                     "not a directory", // does not exist
		filepath.Join(filepath.Dir(f.allowedParent), "lib-other"): "outside", // a sibling sharing the prefix
		f.proj + "\x00/x":      "NUL",
		"/nonexistent-dir-xyz": "not a directory",
	}
	for in, want := range refused {
		got, err := f.tools.confine("cwd", in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("confine(%q) = %q, %v; want an error with %q", in, got, err, want)
		}
	}
	// The refusal says how to allow a directory.
	_, err := f.tools.confine("cwd", "/etc")
	for _, want := range []string{"allowed_dirs", f.proj, filepath.Join(f.proj, "agentkernel.toml"), "restart"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	// A server whose project directory is / allows nothing by cwd.
	root := newTools(Options{Dir: "/", Warn: func(string, ...any) {}})
	if _, err := root.confine("cwd", "/etc"); err == nil {
		t.Error("a server started in / lets cwd name /etc")
	}
}

// TestRootsResolvedOnce: [mcp] allowed_dirs are resolved when the server
// starts: re-pointing a listed link later, or creating a listed
// directory that did not exist, allows nothing new; each entry that
// allows nothing is named in one warning at start.
func TestRootsResolvedOnce(t *testing.T) {
	f := newConfineFixture(t)
	if len(f.warnings) != 3 {
		t.Errorf("warnings at start: %q, want one each for /, /nonexistent-dir-xyz and later", f.warnings)
	}
	for _, want := range []string{"/nonexistent-dir-xyz", filepath.Join(f.base, "later"), `root directory`} {
		if !strings.Contains(strings.Join(f.warnings, "\n"), want) {
			t.Errorf("no warning names %s: %q", want, f.warnings)
		}
	}
	alias := filepath.Join(f.base, "allowed-alias")
	if err := os.Remove(alias); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.outside, alias); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(f.base, "later"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{f.outside, alias, filepath.Join(f.base, "later")} {
		if got, err := f.tools.confine("cwd", dir); err == nil {
			t.Errorf("after start, confine(%s) = %s: allowed", dir, got)
		}
	}
	if got, err := f.tools.confine("cwd", f.allowed); err != nil || got != f.allowed {
		t.Errorf("the allowed directory as resolved at start: %q, %v", got, err)
	}
	n := len(f.warnings)
	f.tools.confine("cwd", f.allowed)
	f.tools.confine("cwd", "/etc")
	if len(f.warnings) != n {
		t.Errorf("warnings after start: %q", f.warnings[n:])
	}
}

// TestConfineNamesConfigFiles: the refusal names the files the server's
// own configuration came from (--config and the user file), and where
// allowed_dirs was set.
func TestConfineNamesConfigFiles(t *testing.T) {
	f := newConfineFixture(t)
	explicit := filepath.Join(f.base, "elsewhere.toml")
	user := filepath.Join(f.base, "user.toml")
	if err := os.WriteFile(explicit, []byte("# the server's --config\n[mcp]\nallowed_dirs = [\""+f.allowed+"\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(user, []byte("[resources]\npids = 50\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := f.options()
	opts.LoadConfig = func(dir string) (*config.Config, error) {
		c, _, err := config.Load(config.LoadOptions{Path: explicit, Dir: dir, UserPath: user})
		return c, err
	}
	tl := newTools(opts)
	_, err := tl.confine("cwd", "/etc")
	if err == nil {
		t.Fatal("/etc allowed")
	}
	for _, want := range []string{"in " + explicit + " or in " + user, "set in project " + explicit + ":3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), filepath.Join(f.proj, "agentkernel.toml")) {
		t.Errorf("message names a file the server does not read: %q", err)
	}
}

// TestCheckMountsAfterSwap: the directory confine checked is replaced by
// a symbolic link to a directory outside before the spec is made; the
// spec's /workspace source is then outside and the run is refused.
func TestCheckMountsAfterSwap(t *testing.T) {
	f := newConfineFixture(t)
	sub := filepath.Join(f.proj, "swapped")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := f.tools.confine("cwd", sub)
	if err != nil {
		t.Fatal(err)
	}
	resolve := func() *sandbox.Spec {
		t.Helper()
		spec, _, err := policy.Resolve(policy.Input{Config: config.Defaults(), Args: []string{"true"}, Cwd: dir,
			Overrides: policy.Overrides{Image: "host"}})
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	if err := f.tools.checkMounts(resolve()); err != nil {
		t.Fatalf("the checked directory itself: %v", err)
	}
	// The swap.
	if err := os.Remove(sub); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.outside, sub); err != nil {
		t.Fatal(err)
	}
	spec := resolve()
	err = f.tools.checkMounts(spec)
	if err == nil || !strings.Contains(err.Error(), f.outside) || !strings.Contains(err.Error(), "outside the directories") {
		t.Errorf("swapped for a link to %s: mounts %+v, err %v", f.outside, spec.Mounts, err)
	}
	// Sources that are not clean and resolved do not pass by their text.
	for _, src := range []string{f.proj + "/../outside", "proj/sub", "/", f.proj + "-other", ""} {
		s := &sandbox.Spec{Mounts: []sandbox.Mount{{Kind: sandbox.MountCopyOnWrite, Source: src, Dest: policy.WorkspaceDir}}}
		if err := f.tools.checkMounts(s); err == nil {
			t.Errorf("source %q passed", src)
		}
	}
	for _, src := range []string{f.proj, filepath.Join(f.proj, "sub"), filepath.Join(f.allowed, "pkg")} {
		s := &sandbox.Spec{Mounts: []sandbox.Mount{{Kind: sandbox.MountBind, Source: src, Dest: policy.WorkspaceDir}}}
		if err := f.tools.checkMounts(s); err != nil {
			t.Errorf("source %q: %v", src, err)
		}
	}
}

// recorder is a backend that records the specs it is asked to run and
// runs nothing; hostImages hands it the host image.
type recorder struct {
	mu    sync.Mutex
	specs []*sandbox.Spec
}

func (r *recorder) Name() string { return "recorder" }

func (r *recorder) Run(ctx context.Context, spec *sandbox.Spec, stdio sandbox.Stdio) (sandbox.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.specs = append(r.specs, spec)
	return sandbox.Result{}, nil
}

func (r *recorder) last() *sandbox.Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.specs) == 0 {
		return nil
	}
	return r.specs[len(r.specs)-1]
}

type hostImages struct{}

func (hostImages) Ensure(ctx context.Context, ref, pull string) (cache.Rootfs, error) {
	if ref != "host" {
		return cache.Rootfs{}, errors.New("only the host image here")
	}
	return cache.Rootfs{Ref: "host", Host: true}, nil
}
func (hostImages) Unreachable(error) bool { return false }
func (hostImages) Host() cache.Rootfs     { return cache.Rootfs{Ref: "host", Host: true} }

// sdkSession connects an SDK client to s in-process.
func sdkSession(t *testing.T, s *sdk.Server) *sdk.ClientSession {
	t.Helper()
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// TestRunCwdConfined: sandbox_run over the real SDK refuses a cwd outside
// the rule before any sandbox is made, and mounts the resolved directory
// of an allowed one.
func TestRunCwdConfined(t *testing.T) {
	f := newConfineFixture(t)
	rec := &recorder{}
	opts := f.options()
	opts.Manager = sandbox.NewManager(sandbox.ManagerOptions{Images: hostImages{}, Backends: []sandbox.Backend{rec}, Default: "recorder"})
	cs := sdkSession(t, NewServer(opts))
	for _, cwd := range []string{"/etc", "/", filepath.Join(f.proj, "etc-link"), f.proj + "/../..", "etc", f.outside} {
		text, isErr := callText(t, cs, "sandbox_run", map[string]any{"command": []string{"true"}, "cwd": cwd, "image": "host", "profile": "permissive"})
		if !isErr || !strings.Contains(text, "cwd") {
			t.Errorf("cwd %s: %q (isError %v)", cwd, text, isErr)
		}
	}
	if rec.last() != nil {
		t.Errorf("a refused cwd ran: %+v", rec.last())
	}
	text, isErr := callText(t, cs, "sandbox_run", map[string]any{"command": []string{"true"}, "cwd": filepath.Join(f.proj, "lib-link"), "image": "host"})
	spec := rec.last()
	if isErr || spec == nil {
		t.Fatalf("allowed cwd: %q", text)
	}
	if m := mountAt(spec, policy.WorkspaceDir); m == nil || m.Source != f.allowed {
		t.Errorf("allowed cwd mounts %+v, want %s", spec.Mounts, f.allowed)
	}
}

// TestRunServerConfigOnly: every call is governed by the server's own
// configuration, loaded once. A cwd below the project without an
// agentkernel.toml keeps the project's [security.commands]; one whose
// own agentkernel.toml loosens everything it can (an agent can write
// such a file in its workspace) gets none of it.
func TestRunServerConfigOnly(t *testing.T) {
	f := newConfineFixture(t)
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	projCfg := filepath.Join(f.proj, "agentkernel.toml")
	write(projCfg, "[security.commands]\nblock = [\"wget\"]\n")
	hostile := filepath.Join(f.proj, "sub", "hostile")
	write(filepath.Join(hostile, "agentkernel.toml"), `[security]
profile = "permissive"
mount_cwd = "rw"
mount_home = true
seccomp = "unconfined"
read_only = false
[security.commands]
block = []
[resources]
memory_mb = 1000000
pids = 1000000
[mcp]
allowed_dirs = ["/etc"]
`)
	home := filepath.Join(f.base, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	var loaded []string
	rec := &recorder{}
	opts := f.options()
	opts.HomeDir = home
	opts.Manager = sandbox.NewManager(sandbox.ManagerOptions{Images: hostImages{}, Backends: []sandbox.Backend{rec}, Default: "recorder"})
	opts.LoadConfig = func(dir string) (*config.Config, error) {
		loaded = append(loaded, dir)
		c, _, err := config.Load(config.LoadOptions{Dir: dir, NoUserFile: true})
		return c, err
	}
	cs := sdkSession(t, NewServer(opts))

	for _, cwd := range []string{"", filepath.Join(f.proj, "sub"), filepath.Join(f.proj, "sub", "deeper"), hostile} {
		args := map[string]any{"command": []string{"wget", "http://127.0.0.1:1/"}, "image": "host"}
		if cwd != "" {
			args["cwd"] = cwd
		}
		text, isErr := callText(t, cs, "sandbox_run", args)
		if !isErr || !strings.Contains(text, "blocked by [security.commands]") || !strings.Contains(text, projCfg) {
			t.Errorf("cwd %q: wget: %q (isError %v), want the project's rule", cwd, text, isErr)
		}
	}
	if rec.last() != nil {
		t.Fatalf("a blocked command ran: %+v", rec.last())
	}

	text, isErr := callText(t, cs, "sandbox_run", map[string]any{"command": []string{"true"}, "image": "host", "cwd": hostile})
	spec := rec.last()
	if isErr || spec == nil {
		t.Fatalf("cwd with its own agentkernel.toml: %q", text)
	}
	if spec.Profile != config.ProfileModerate || spec.Security.Seccomp == sandbox.SeccompUnconfined || spec.Resources.MemoryMB == 1000000 ||
		spec.Resources.PIDs == 1000000 || mountAt(spec, policy.HomeDir) != nil || spec.Commands == nil || len(spec.Commands.Block) != 1 {
		t.Errorf("the cwd's agentkernel.toml loosened the sandbox: %+v", spec)
	}
	if m := mountAt(spec, policy.WorkspaceDir); m == nil || m.Source != hostile || m.Kind != sandbox.MountCopyOnWrite {
		t.Errorf("workspace of the hostile cwd: %+v, want %s copy-on-write", m, hostile)
	}
	if _, err := f.tools.confine("cwd", "/etc"); err == nil {
		t.Error("/etc allowed")
	}
	if len(loaded) != 1 || loaded[0] != f.proj {
		t.Errorf("configuration loaded for %q, want once for %s", loaded, f.proj)
	}
	// The user hears once that the cwd's file is not read.
	callText(t, cs, "sandbox_run", map[string]any{"command": []string{"true"}, "image": "host", "cwd": hostile})
	n := 0
	for _, w := range f.warnings {
		if strings.Contains(w, filepath.Join(hostile, "agentkernel.toml")+" is not read") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("warnings about the cwd's own file: %d, want 1: %q", n, f.warnings)
	}
}

// TestRunConfigErrorFailsClosed: when the server's configuration cannot
// be loaded, runs are refused with its error instead of going on with
// the defaults (which would drop its rules).
func TestRunConfigErrorFailsClosed(t *testing.T) {
	f := newConfineFixture(t)
	rec := &recorder{}
	opts := f.options()
	opts.Manager = sandbox.NewManager(sandbox.ManagerOptions{Images: hostImages{}, Backends: []sandbox.Backend{rec}, Default: "recorder"})
	opts.LoadConfig = func(dir string) (*config.Config, error) { return nil, errors.New("agentkernel.toml:3: bad value") }
	cs := sdkSession(t, NewServer(opts))
	for tool, args := range map[string]map[string]any{
		"sandbox_run":    {"command": []string{"true"}, "image": "host"},
		"sandbox_create": {"name": "x", "image": "host"},
	} {
		text, isErr := callText(t, cs, tool, args)
		if !isErr || !strings.Contains(text, "agentkernel.toml:3: bad value") {
			t.Errorf("%s: %q (isError %v)", tool, text, isErr)
		}
	}
	if rec.last() != nil {
		t.Errorf("ran without the server's configuration: %+v", rec.last())
	}
}

func mountAt(spec *sandbox.Spec, dest string) *sandbox.Mount {
	for i := range spec.Mounts {
		if spec.Mounts[i].Dest == dest {
			return &spec.Mounts[i]
		}
	}
	return nil
}

package mcp

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// confineFixture: a project directory with a subdirectory, a link out of
// it to /etc and one to an allowed directory's parent, and an allowed
// directory elsewhere (reached through a symbolic link in the list).
type confineFixture struct {
	proj, allowed, allowedParent, outside string
	tools                                 *tools
}

func newConfineFixture(t *testing.T) *confineFixture {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &confineFixture{
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
	f.tools = &tools{opts: Options{Dir: f.proj, AllowedDirs: []string{filepath.Join(base, "allowed-alias"), "/", "/nonexistent-dir-xyz"}}}
	return f
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
	for _, want := range []string{"allowed_dirs", f.proj, "agentkernel.toml", "restart"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	// A server whose project directory is / allows nothing by cwd.
	root := &tools{opts: Options{Dir: "/"}}
	if _, err := root.confine("cwd", "/etc"); err == nil {
		t.Error("a server started in / lets cwd name /etc")
	}
}

// TestRunCwdConfined: sandbox_run over the real SDK refuses a cwd outside
// the rule before any configuration is read or sandbox is made, and
// passes the resolved directory on.
func TestRunCwdConfined(t *testing.T) {
	f := newConfineFixture(t)
	var loaded []string
	opts := f.tools.opts
	opts.Manager = sandbox.NewManager(sandbox.ManagerOptions{})
	opts.LoadConfig = func(dir string) (*config.Config, error) {
		loaded = append(loaded, dir)
		return config.Defaults(), nil
	}
	s := NewServer(opts)
	st, ct := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, cwd := range []string{"/etc", "/", filepath.Join(f.proj, "etc-link"), f.proj + "/../..", "etc", f.outside} {
		text, isErr := callText(t, cs, "sandbox_run", map[string]any{"command": []string{"true"}, "cwd": cwd, "image": "host", "profile": "permissive"})
		if !isErr || !strings.Contains(text, "cwd") {
			t.Errorf("cwd %s: %q (isError %v)", cwd, text, isErr)
		}
	}
	if len(loaded) != 0 {
		t.Errorf("configuration read for refused directories: %q", loaded)
	}
	// An allowed one goes on to the configuration of its resolved path
	// (and then fails here: this Manager has no backend).
	text, isErr := callText(t, cs, "sandbox_run", map[string]any{"command": []string{"true"}, "cwd": filepath.Join(f.proj, "lib-link"), "image": "host"})
	if !isErr || strings.Contains(text, "outside") || len(loaded) != 1 || loaded[0] != f.allowed {
		t.Errorf("allowed cwd: %q, loaded %q", text, loaded)
	}
}

package attack

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestVerdictNotApplicable: verdict passes an "n-a" only where the
// probe's table row declares it for the battery's kind of user.
func TestVerdictNotApplicable(t *testing.T) {
	o := &outcome{Probe: "swapon", Result: blocked}
	decl := &outcome{Probe: "swapon", Result: notApp, Detail: "swap needs CAP_SYS_ADMIN in the initial user namespace, which this user lacks with or without a sandbox: swapon: operation not permitted; swapoff: operation not permitted"}
	if cell, ok := verdict("swapon", "moderate", "rootless", o, decl); !ok || cell != notApp {
		t.Errorf("declared rootless n-a: %q %v", cell, ok)
	}
	for _, mode := range []string{"root", modePool} {
		if cell, ok := verdict("swapon", "moderate", mode, o, decl); ok {
			t.Errorf("n-a not declared for %s passed: %q", mode, cell)
		}
	}
	odd := &outcome{Probe: "swapon", Result: notApp, Detail: "swapon: no such device"}
	if cell, ok := verdict("swapon", "moderate", "rootless", o, odd); ok {
		t.Errorf("n-a for an undeclared reason passed: %q", cell)
	}
	reach := &outcome{Probe: "swapon", Result: reachable}
	if cell, ok := verdict("swapon", "moderate", "root", &outcome{Probe: "swapon", Result: notApp}, reach); ok {
		t.Errorf("a probe's own n-a where its control reached the target passed: %q", cell)
	}
}

// TestJudgeChown: workspace_chown's judge fails files that another host
// user owns, and passes only the invoking user's and one sandbox block's.
func TestJudgeChown(t *testing.T) {
	testenv.RequireRoot(t)
	t.Setenv("SUDO_UID", "")
	t.Setenv("SUDO_GID", "")
	const base = 2 << 20 // a block at 2 Mi, above the sandboxes' minimum
	files := func(owner func(id int) int) string {
		dir := t.TempDir()
		for _, id := range chownIDs {
			p := filepath.Join(dir, fmt.Sprintf("attack-chown-%d", id))
			must(t, os.WriteFile(p, []byte("x\n"), 0o644))
			must(t, os.Lchown(p, owner(id), owner(id)))
		}
		return dir
	}
	good := func(id int) int {
		if id == 0 {
			return 0
		}
		return base + id
	}
	if res, d := judgeChown(files(good), false); res != blocked {
		t.Errorf("the sandbox's own block: %s: %s", res, d)
	}
	for name, owner := range map[string]func(int) int{
		"identity map (host 1001 gets the file)": func(id int) int { return id },
		"two blocks":                             func(id int) int { return good(id) + map[bool]int{true: 65536}[id == 65534] },
		"below the sandboxes' range":             func(id int) int { return map[bool]int{true: 0, false: 100000 + id}[id == 0] },
		"root's file is another user's":          func(id int) int { return map[bool]int{true: 1000, false: base + id}[id == 0] },
	} {
		if res, d := judgeChown(files(owner), false); res != allowed {
			t.Errorf("%s: %s: %s", name, res, d)
		}
	}
	if res, d := judgeChown(t.TempDir(), false); res != errored || !strings.Contains(d, "left no") {
		t.Errorf("no files: %s: %s", res, d)
	}
	// Rootless: only the caller's.
	if res, d := judgeChown(files(func(int) int { return 0 }), true); res != blocked {
		t.Errorf("rootless, the caller's: %s: %s", res, d)
	}
	if res, d := judgeChown(files(good), true); res != allowed {
		t.Errorf("rootless, a block: %s: %s", res, d)
	}
}

// TestScanWorkspace: the host scan flags another user's file, ids of two
// blocks, and a directory with nothing to scan.
func TestScanWorkspace(t *testing.T) {
	testenv.RequireRoot(t)
	t.Setenv("SUDO_UID", "")
	t.Setenv("SUDO_GID", "")
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "README"), nil, 0o644))
	if _, foreign := scanWorkspace(dir); len(foreign) != 0 {
		t.Errorf("root's README: %v", foreign)
	}
	f := filepath.Join(dir, "f")
	must(t, os.WriteFile(f, nil, 0o644))
	must(t, os.Lchown(f, 2<<20+1000, 2<<20+1000))
	if _, foreign := scanWorkspace(dir); len(foreign) != 0 {
		t.Errorf("one block: %v", foreign)
	}
	g := filepath.Join(dir, "g")
	must(t, os.WriteFile(g, nil, 0o644))
	must(t, os.Lchown(g, 3<<20, 3<<20))
	if _, foreign := scanWorkspace(dir); len(foreign) == 0 {
		t.Error("ids of two blocks passed")
	}
	must(t, os.Lchown(g, 1001, 1001))
	if _, foreign := scanWorkspace(dir); len(foreign) == 0 {
		t.Error("host user 1001's file passed")
	}
	if _, foreign := scanWorkspace(t.TempDir()); len(foreign) == 0 {
		t.Error("an empty directory passed: nothing was scanned")
	}
	if _, foreign := scanWorkspace(filepath.Join(dir, "missing")); len(foreign) == 0 {
		t.Error("a missing directory passed")
	}
}

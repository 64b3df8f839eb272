package plugin

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestInstallRollsBack: a write that fails after others succeeded (here
// the command's directory is a read-only mount, which reading cannot
// tell) rolls back those: the merged .mcp.json has its content again,
// its backup and the skill are gone, and so are the directories made for
// them.
func TestInstallRollsBack(t *testing.T) {
	testenv.RequireRoot(t)
	o := opts(t)
	mcp := filepath.Join(o.ProjectDir, ".mcp.json")
	orig := `{"mcpServers": {"github": {"command": "npx"}}, "z": 1}` + "\n"
	write(t, mcp, orig)
	commands := filepath.Join(o.ProjectDir, ".claude", "commands")
	if err := os.MkdirAll(commands, 0o755); err != nil {
		t.Fatal(err)
	}

	// Install runs on a thread of its own in a mount namespace of its
	// own, where the command's directory is a read-only tmpfs; the
	// thread ends with the goroutine.
	type result struct {
		cs  []Change
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			done <- result{err: err}
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			done <- result{err: err}
			return
		}
		if err := unix.Mount("tmpfs", commands, "tmpfs", unix.MS_RDONLY, "size=64k"); err != nil {
			done <- result{err: err}
			return
		}
		cs, err := Install("claude", o)
		done <- result{cs, err}
	}()
	r := <-done
	if r.err == nil || !strings.Contains(r.err.Error(), "sandbox.md") || !strings.Contains(r.err.Error(), "restored") || r.cs != nil {
		t.Fatalf("install onto a read-only directory: %v %+v", r.err, r.cs)
	}
	if got := read(t, mcp); got != orig {
		t.Errorf(".mcp.json after the rollback:\n%s", got)
	}
	for _, p := range []string{mcp + ".bak", filepath.Join(o.ProjectDir, ".claude", "skills")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is left after the rollback", p)
		}
	}
	if ents, _ := os.ReadDir(commands); len(ents) != 0 {
		t.Errorf("the command's directory holds %v", ents)
	}

	// The same install where it can write: everything is written.
	cs, err := Install("claude", o)
	if err != nil || len(cs) != 3 || cs[0].Backup != mcp+".bak" {
		t.Fatalf("install: %v %+v", err, cs)
	}
	for _, p := range []string{filepath.Join(commands, "sandbox.md"), filepath.Join(o.ProjectDir, ".claude", "skills", "agentkernel", "SKILL.md")} {
		if _, err := os.Stat(p); err != nil {
			t.Error(err)
		}
	}
}

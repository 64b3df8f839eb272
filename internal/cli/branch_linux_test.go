package cli

import (
	"os"
	"path/filepath"
	"testing"
)

func TestBranchName(t *testing.T) {
	root := filepath.Join(t.TempDir(), "My_Project.v2")
	os.MkdirAll(filepath.Join(root, ".git"), 0o755)
	os.MkdirAll(filepath.Join(root, "a", "b"), 0o755)
	for head, want := range map[string]string{
		"ref: refs/heads/main\n":                     "My-Project-v2-main",
		"ref: refs/heads/feat/x__y--z\n":             "My-Project-v2-feat-x-y-z",
		"0123456789abcdef0123456789abcdef01234567\n": "My-Project-v2-0123456",
	} {
		os.WriteFile(filepath.Join(root, ".git", "HEAD"), []byte(head), 0o644)
		got, err := branchName(filepath.Join(root, "a", "b"))
		if err != nil || got != want {
			t.Errorf("%q: got %q, %v; want %q", head, got, err, want)
		}
	}
	// A worktree: .git is a file naming the git directory.
	wt := filepath.Join(t.TempDir(), "wt")
	gd := filepath.Join(t.TempDir(), "gitdir")
	os.MkdirAll(wt, 0o755)
	os.MkdirAll(gd, 0o755)
	os.WriteFile(filepath.Join(wt, ".git"), []byte("gitdir: "+gd+"\n"), 0o644)
	os.WriteFile(filepath.Join(gd, "HEAD"), []byte("ref: refs/heads/very-long-branch-name-that-goes-on-and-on-and-on-beyond-the-limit\n"), 0o644)
	got, err := branchName(wt)
	if err != nil || len(got) > 63 || sanitizeName(got) != got {
		t.Errorf("worktree: %q %v", got, err)
	}
	if _, err := branchName(t.TempDir()); err == nil {
		t.Error("outside a work tree: no error")
	}
}

package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestListenUnixSwapped: a user who can write the socket's directory
// replaces the new socket with a symbolic link to a file of the
// server's user right after bind: the server must not change that
// file's mode (chmod follows links) and must not serve.
func TestListenUnixSwapped(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "api.sock")
	ln, err := listenUnix(sock, func() {
		if err := os.Remove(sock); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(victim, sock); err != nil {
			t.Error(err)
		}
	})
	if err == nil {
		ln.Close()
		t.Errorf("served on a path that was swapped for a symbolic link")
	}
	if fi, err := os.Stat(victim); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("the link's target: %v %v, want mode 0644 unchanged", fi.Mode(), err)
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != os.ModeSymlink {
		t.Errorf("what was planted at the path was removed or changed: %v %v", fi, err)
	}

	// Unhindered: a socket of mode 0600.
	good := filepath.Join(dir, "good.sock")
	ln, err = listenUnixSocket(good)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if fi, err := os.Lstat(good); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket: %v %v", fi, err)
	}
}

package native

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestVolumeSourceNoSymlinks: a volume's host path is mounted with no
// symlink followed (policy resolved them when it made the spec), so a
// symlink swapped into the path between the check and the mount (by a
// sandbox that can write a parent directory) cannot redirect the mount
// to another host directory: such a path is refused, bind and
// copy-on-write alike, and a real path still mounts.
func TestVolumeSourceNoSymlinks(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	real := filepath.Join(base, "real")
	secret := filepath.Join(base, "secret")
	for _, d := range []string{real, secret} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(secret, "s"), []byte("host secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The project's sub directory became a symlink to a host directory.
	if err := os.Symlink(secret, filepath.Join(real, "sub")); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []sandbox.MountKind{sandbox.MountBind, sandbox.MountCopyOnWrite} {
		spec := newSpec("cat", "/w/s")
		spec.Mounts = []sandbox.Mount{{Kind: kind, Source: filepath.Join(real, "sub"), Dest: "/w"}}
		o := runSpec(t, spec, nil)
		if o.err == nil || !strings.Contains(o.err.Error(), "symlink") || strings.Contains(o.stdout, "host secret") {
			t.Errorf("%s of a path through a symlink: %v %+v %q", kind, o.err, o.res, o.stdout)
		}
		spec = newSpec("ls", "/w")
		spec.Mounts = []sandbox.Mount{{Kind: kind, Source: real, Dest: "/w"}}
		if o := runSpec(t, spec, nil); o.err != nil || o.stdout != "sub\n" {
			t.Errorf("%s of a real path: %v %q %q", kind, o.err, o.stdout, o.stderr)
		}
	}
}

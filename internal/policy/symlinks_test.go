package policy

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentkernel/agentkernel/internal/config"
)

// TestMountSourcesResolved: the project directory, $HOME and -v host
// paths reach the spec with their symlinks resolved, since the backend
// mounts host paths without following any.
func TestMountSourcesResolved(t *testing.T) {
	f := newFixture(t)
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(t.TempDir(), "vol")
	if err := os.Symlink(real, vol); err != nil {
		t.Fatal(err)
	}
	f.cwd = link
	spec, _ := f.resolve(t, config.Defaults(), Overrides{Profile: "permissive", Volumes: []string{vol + ":/data"}}, "true")
	want, _ := filepath.EvalSymlinks(real)
	for _, dest := range []string{WorkspaceDir, "/data"} {
		m := mountAt(spec, dest)
		if m == nil || m.Source != want {
			t.Errorf("%s: source %+v, want %s", dest, m, want)
		}
	}
}

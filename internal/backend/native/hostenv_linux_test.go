package native

import (
	"os"
	"strings"
	"testing"
)

func TestHostImagePath(t *testing.T) {
	dirs := func(p string) map[string]bool {
		m := map[string]bool{}
		for _, d := range strings.Split(p, ":") {
			m[d] = true
		}
		return m
	}
	home := t.TempDir() // outside the host image's view
	got := dirs(hostImagePath("/usr/local/go/bin:" + home + ":/opt/x/bin:relative:/usr/../usr/bin:/usr/bin"))
	if fi, err := os.Stat("/usr/local/go/bin"); err == nil && fi.IsDir() && !got["/usr/local/go/bin"] {
		t.Errorf("PATH %v misses /usr/local/go/bin, which the host has", got)
	}
	for _, bad := range []string{home, "/opt/x/bin", "relative", "/usr/../usr/bin", ""} {
		if got[bad] {
			t.Errorf("PATH %v holds %q, outside the host image or not clean", got, bad)
		}
	}
	if !got["/usr/bin"] {
		t.Errorf("PATH %v misses /usr/bin", got)
	}
	// The toolchain's bin is there even when the host's PATH lacks it.
	if fi, err := os.Stat("/usr/local/go/bin"); err == nil && fi.IsDir() && !dirs(hostImagePath("/usr/bin"))["/usr/local/go/bin"] {
		t.Error("PATH misses /usr/local/go/bin when the host's PATH does not name it")
	}
	env := hostImageEnv([]string{"PATH=/nowhere", "LANG=C"}, true)
	if len(env) != 2 || env[0] != "LANG=C" || !strings.HasPrefix(env[1], "PATH=") || strings.Contains(env[1], "/nowhere") {
		t.Errorf("hostImageEnv = %q", env)
	}
	if env := hostImageEnv([]string{"PATH=/nowhere"}, false); len(env) != 1 || env[0] != "PATH=/nowhere" {
		t.Errorf("hostImageEnv changed an image's environment: %q", env)
	}
}

package config

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestAllowDegraded: [security] allow_degraded takes the known names
// (case-insensitive), refuses others with file:line, and a project file
// found in the working directory cannot set it: the user's value stands,
// with a warning at the project file's line. --config is trusted.
func TestAllowDegraded(t *testing.T) {
	home := t.TempDir()
	user := write(t, filepath.Join(home, "config.toml"), "[security]\nallow_degraded = [\"landlock\"]\n")
	dir := t.TempDir()
	write(t, filepath.Join(dir, FileName), "[sandbox]\nname = \"p\"\n[security]\nallow_degraded = [\"cgroups\", \"landlock\"]\n")

	c, warns, err := Load(LoadOptions{Dir: dir, UserPath: user})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Security.AllowDegraded, []string{"landlock"}) {
		t.Errorf("a project file widened allow_degraded: %q", c.Security.AllowDegraded)
	}
	if s := c.Source("security.allow_degraded"); s.Kind != SourceUser || s.Path != user || s.Line != 2 {
		t.Errorf("source %+v, want the user file's line 2", s)
	}
	found := false
	for _, w := range warns {
		if strings.Contains(w.Msg, "allow_degraded is ignored") && w.Line == 4 && w.Path == filepath.Join(dir, FileName) {
			found = true
		}
	}
	if !found {
		t.Errorf("no warning at the project file's line 4: %v", warns)
	}

	// Without a user value, the project's is dropped entirely.
	c, _, err = Load(LoadOptions{Dir: dir, UserPath: filepath.Join(home, "none.toml")})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Security.AllowDegraded) != 0 || c.IsSet("security.allow_degraded") {
		t.Errorf("project allow_degraded kept: %q %+v", c.Security.AllowDegraded, c.Source("security.allow_degraded"))
	}

	// --config names a file the user chose: trusted.
	c, _, err = Load(LoadOptions{Path: filepath.Join(dir, FileName), UserPath: user})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Security.AllowDegraded, []string{"cgroups", "landlock"}) {
		t.Errorf("--config: %q", c.Security.AllowDegraded)
	}

	// Names are normalised; unknown ones are errors with file:line, in
	// the user's file too.
	c, _, err = Parse([]byte("[security]\nallow_degraded = [\" CGroups \"]\n"), "p.toml")
	if err != nil || !slices.Equal(c.Security.AllowDegraded, []string{"cgroups"}) {
		t.Errorf("normalised: %q %v", c.Security.AllowDegraded, err)
	}
	for _, doc := range []string{
		"[security]\nallow_degraded = [\"seccomp\"]\n",
		"[security]\nallow_degraded = [\"cgroups\", \"\"]\n",
		"[security]\nallow_degraded = [\"all\"]\n",
	} {
		bad := write(t, filepath.Join(home, "bad.toml"), doc)
		_, _, err := Load(LoadOptions{Dir: t.TempDir(), UserPath: bad})
		var e *Error
		if !errors.As(err, &e) || e.Line != 2 || e.Path != bad || e.Key != "security.allow_degraded" || !strings.Contains(e.Msg, "allow_degraded takes cgroups, landlock") {
			t.Errorf("%q: %v", doc, err)
		}
	}
	if _, _, err := Parse([]byte("[security]\nallow_degraded = \"cgroups\"\n"), "p.toml"); err == nil {
		t.Error("a string, not a list, was accepted")
	}
}

package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestNormalizeAllowedHost(t *testing.T) {
	for in, want := range map[string]string{
		"MyBox.LAN": "mybox.lan", "devbox.": "devbox", "*": "*", "10.0.0.5": "10.0.0.5", "[FD00::1]": "fd00::1",
		"::ffff:10.0.0.5": "10.0.0.5", "a_b.example": "a_b.example",
	} {
		if got, err := NormalizeAllowedHost(in); err != nil || got != want {
			t.Errorf("NormalizeAllowedHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "http://x", "x:80", "*.example.com", "x/y", "-x", "a..b", "é.example"} {
		if got, err := NormalizeAllowedHost(in); err == nil {
			t.Errorf("NormalizeAllowedHost(%q) = %q, want an error", in, got)
		}
	}
}

func TestNormalizeOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"http://localhost:3000": "http://localhost:3000", "HTTPS://App.Example/": "https://app.example",
		"http://x:80": "http://x", "https://x:443": "https://x", "https://x:8443": "https://x:8443",
		"http://[::1]:3000": "http://[::1]:3000",
	} {
		if got, err := NormalizeOrigin(in); err != nil || got != want {
			t.Errorf("NormalizeOrigin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "*", "null", "NULL", "localhost:3000", "ftp://x", "http://x/app",
		"http://u@x", "http://x?a", "http://x:0", "http://x:99999", "http://"} {
		if got, err := NormalizeOrigin(in); err == nil {
			t.Errorf("NormalizeOrigin(%q) = %q, want an error", in, got)
		}
	}
}

// TestLoadUser: the user file alone, without the project file that Load
// lets replace its values.
func TestLoadUser(t *testing.T) {
	dir := t.TempDir()
	user := filepath.Join(dir, "user.toml")
	if err := os.WriteFile(user, []byte("[api]\nallowed_hosts = [\"MyBox.LAN\"]\napi_key_env = \"MY_KEY\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("[api]\nallowed_hosts = [\"evil.example\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	all, _, err := Load(LoadOptions{Dir: dir, UserPath: user})
	if err != nil || !slices.Equal(all.API.AllowedHosts, []string{"evil.example"}) {
		t.Fatalf("Load: %v %v", all.API.AllowedHosts, err)
	}
	c, _, err := LoadUser(LoadOptions{Dir: dir, UserPath: user})
	if err != nil || !slices.Equal(c.API.AllowedHosts, []string{"mybox.lan"}) || c.API.APIKeyEnv != "MY_KEY" {
		t.Errorf("LoadUser: %+v %v", c.API, err)
	}
	if src := c.Source("api.allowed_hosts"); src.Kind != SourceUser || src.Path != user {
		t.Errorf("source: %v", src)
	}
	c, _, err = LoadUser(LoadOptions{UserPath: user, NoUserFile: true})
	if err != nil || len(c.API.AllowedHosts) != 0 {
		t.Errorf("NoUserFile: %+v %v", c.API, err)
	}
	if _, _, err := LoadUser(LoadOptions{UserPath: filepath.Join(dir, "missing.toml")}); err != nil {
		t.Errorf("missing user file: %v", err)
	}
}

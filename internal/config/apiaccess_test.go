package config

import "testing"

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

package config

import (
	"strings"
	"testing"
)

func TestParsePortMapping(t *testing.T) {
	good := map[string]string{
		"8080:80":           "8080:80/tcp",
		"80":                "80:80/tcp",
		"5353:53/tcp":       "5353:53/tcp",
		"0.0.0.0:8080:80":   "0.0.0.0:8080:80/tcp",
		"[::1]:8080:80/TCP": "[::1]:8080:80/tcp",
		"127.0.0.1:1:65535": "127.0.0.1:1:65535/tcp",
	}
	for in, want := range good {
		m, err := ParsePortMapping(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if got := m.String(); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
	for _, in := range []string{"", ":", "0:80", "80:0", "65536:80", "a:b", "1:2:3:4", "80/sctp", "host:80:80", "[::1:80:80", "[::1]:1:2:3", "fe80::1%eth0:80:80", "-1:80", "80:80/"} {
		if m, err := ParsePortMapping(in); err == nil {
			t.Errorf("%q: accepted as %v", in, m)
		}
	}
	// UDP ports cannot be published: refused when parsed, with why,
	// rather than a sandbox that fails to start.
	if _, err := ParsePortMapping("5353:53/udp"); err == nil || !strings.Contains(err.Error(), "only TCP") {
		t.Errorf("5353:53/udp: got %v, want a refusal saying only TCP is published", err)
	}
}

package config

import (
	"strings"
	"testing"
	"time"
)

func TestParseDurationGrammar(t *testing.T) {
	good := map[string]time.Duration{
		"90":       90 * time.Second,
		"0":        0,
		"30s":      30 * time.Second,
		"5m":       5 * time.Minute,
		"2h30m":    2*time.Hour + 30*time.Minute,
		"3d":       72 * time.Hour,
		"1d12h":    36 * time.Hour,
		"1d2h3m4s": 26*time.Hour + 3*time.Minute + 4*time.Second,
		"1h1d":     25 * time.Hour,
		" 2d ":     48 * time.Hour,
		"1.5h":     90 * time.Minute, // time.ParseDuration's forms still read
		"300ms":    300 * time.Millisecond,
		"36500d":   36500 * Day,
	}
	for in, want := range good {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":              "empty",
		"d":             "invalid",
		"3x":            "invalid",
		"-1d":           "invalid",
		"-5m":           "negative",
		"1.5d":          "invalid",
		"2h30":          "invalid",
		"36501d":        "too long",
		"99999999999d":  "too long",
		"9999999999999": "too long",
		"1d\x00":        "invalid",
		"1 d":           "invalid",
	}
	for in, want := range bad {
		if d, err := ParseDuration(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseDuration(%q) = %v, %v; want an error saying %q", in, d, err, want)
		}
	}
}

func TestParseTTL(t *testing.T) {
	for in, want := range map[string]time.Duration{"3": 3 * time.Second, "1h": time.Hour, "2d": 48 * time.Hour, "1d1s": Day + time.Second} {
		if got, err := ParseTTL(in); err != nil || got != want {
			t.Errorf("ParseTTL(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "0s", "0d0h", "", "-1h", "abc"} {
		if d, err := ParseTTL(in); err == nil {
			t.Errorf("ParseTTL(%q) = %v, want an error", in, d)
		}
	}
	if _, err := ParseTTL("0"); err == nil || !strings.Contains(err.Error(), "longer than zero") {
		t.Errorf("ParseTTL(0): %v", err)
	}
}

// The grammar reaches the configuration file's durations too.
func TestDurationTOMLDays(t *testing.T) {
	var d Duration
	if err := d.UnmarshalTOML("2d"); err != nil || time.Duration(d) != 48*time.Hour {
		t.Errorf("UnmarshalTOML(2d) = %v, %v", time.Duration(d), err)
	}
}

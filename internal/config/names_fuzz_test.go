package config

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// sandboxNameRule is the documented rule, written independently of
// ValidateSandboxName: ASCII letters and digits in runs joined by single
// '-' or '_', 1 to 63 characters.
var sandboxNameRule = regexp.MustCompile(`^[A-Za-z0-9]+([-_][A-Za-z0-9]+)*$`)

// FuzzValidateSandboxName: a name is accepted exactly when it follows the
// documented rule; an accepted name is safe as a path component and a
// cgroup name; a rejected one gets one line of error that quotes it
// whenever it is printable.
func FuzzValidateSandboxName(f *testing.F) {
	for _, s := range []string{"a", "my-box", "my_box_2", "A1", "-a", "a-", "a--b", "a-_b", "a b", "a/b", ".", "..", "", "é",
		strings.Repeat("a", 63), strings.Repeat("a", 64), "a\x00", "a\n", "0", "x-y-z_1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidateSandboxName(name)
		want := len(name) <= 63 && sandboxNameRule.MatchString(name)
		if (err == nil) != want {
			t.Fatalf("ValidateSandboxName(%q) = %v, the rule says valid=%v", name, err, want)
		}
		if err == nil {
			if name == "." || name == ".." || strings.ContainsAny(name, "/\x00 \t\n.:") || !utf8.ValidString(name) {
				t.Fatalf("accepted %q is not a safe path component", name)
			}
			return
		}
		msg := err.Error()
		if strings.ContainsAny(msg, "\n\r\x00") {
			t.Fatalf("error for %q is not one clean line: %q", name, msg)
		}
	})
}

// FuzzParseProfileMode: ParseProfile and ParseMode accept exactly the
// documented names and aliases in any case with blanks around, return a
// canonical name, and are idempotent.
func FuzzParseProfileMode(f *testing.F) {
	for _, s := range []string{"moderate", " Permissive ", "RESTRICTIVE", "custom", "native", "default", "claude-code", "claudecode",
		"openai-codex", "gemini-cli", "codex", "x", "", "moderat", "modérate"} {
		f.Add(s)
	}
	profileAliases := map[string]string{"custom": ProfileModerate}
	modeAliases := map[string]string{"default": ModeNative, "claude-code": ModeClaude, "claudecode": ModeClaude,
		"openai-codex": ModeCodex, "gemini-cli": ModeGemini}
	check := func(t *testing.T, what, s string, parse func(string) (string, error), names []string, aliases map[string]string) {
		got, err := parse(s)
		key := strings.ToLower(strings.TrimSpace(s))
		want, ok := aliases[key]
		if !ok && slices.Contains(names, key) {
			want, ok = key, true
		}
		if (err == nil) != ok || (ok && got != want) {
			t.Fatalf("%s(%q) = %q, %v; want %q (valid=%v)", what, s, got, err, want, ok)
		}
		if err == nil {
			if again, err := parse(got); err != nil || again != got {
				t.Fatalf("%s(%q) = %q is not canonical: %q, %v", what, s, got, again, err)
			}
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		check(t, "ParseProfile", s, ParseProfile, ProfileNames(), profileAliases)
		check(t, "ParseMode", s, ParseMode, ModeNames(), modeAliases)
	})
}

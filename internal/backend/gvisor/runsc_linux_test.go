package gvisor

import (
	"regexp"
	"strings"
	"testing"
)

// TestTooOldHostile: tooOld reads `runsc --version` by hand, and gives
// the answer the pattern release-(\d{8}) on its first line gave, for
// hostile and malformed versions too (the runsc is the user's choice:
// AGENTKERNEL_RUNSC).
func TestTooOldHostile(t *testing.T) {
	re := regexp.MustCompile(`release-(\d{8})`)
	byPattern := func(version string) (string, bool) {
		first, _, _ := strings.Cut(version, "\n")
		m := re.FindStringSubmatch(first)
		if m == nil {
			return "", false
		}
		return "release-" + m[1], m[1] < "20230601"
	}
	for _, c := range []struct {
		version string
		name    string
		old     bool
	}{
		{"", "", false},
		{"release-", "", false},
		{"release-2023060", "", false},                               // seven digits
		{"release-2023060x.0", "", false},                            // a non-digit among the eight
		{"release-20230601", "release-20230601", false},              // the oldest accepted, at the end
		{"release-20230531.0", "release-20230531", true},             // the day before
		{"release-999999999999999999999", "release-99999999", false}, // more digits: the first eight
		{"release-00000000", "release-00000000", true},               // zeros
		{"release-release-20220101.0", "release-20220101", true},     // a second "release-" after a bad one
		{"release-abc release-20200101.0", "release-20200101", true}, // the first good one counts
		{"release-20240513.0 release-20200101.0", "release-20240513", false},
		{"xrelease-20200101", "release-20200101", true},                    // not anchored, as the pattern
		{"RELEASE-20200101", "", false},                                    // case matters
		{"release-２０２００１０１", "", false},                                    // full-width digits are not digits
		{"release-٢٠٢٠٠١٠١", "", false},                                    // nor Arabic-Indic ones
		{"release-2020\x000101", "", false},                                // a NUL among them
		{"runsc version VERSION_MISSING\nrelease-20200101.0\n", "", false}, // only the first line is read
		{"runsc version release-20200101.0\r\nspec: 1.0\n", "release-20200101", true},
		{strings.Repeat("release-", 100000) + "20200101", "release-20200101", true}, // long
		{"\xff\xfe release-20200101 \xff", "release-20200101", true},                // invalid UTF-8 around it
	} {
		name, old := tooOld(c.version)
		if name != c.name || old != c.old {
			t.Errorf("tooOld(%.60q) = %q, %v; want %q, %v", c.version, name, old, c.name, c.old)
		}
		if pn, po := byPattern(c.version); pn != name || po != old {
			t.Errorf("tooOld(%.60q) = %q, %v; the pattern says %q, %v", c.version, name, old, pn, po)
		}
	}
}

// FuzzTooOld: tooOld agrees with the pattern it replaced on any input.
func FuzzTooOld(f *testing.F) {
	for _, s := range []string{"runsc version release-20220228.0\nspec: 1.0.2\n", "release-release-2024010", "release-1234567\n8"} {
		f.Add(s)
	}
	re := regexp.MustCompile(`release-(\d{8})`)
	f.Fuzz(func(t *testing.T, version string) {
		first, _, _ := strings.Cut(version, "\n")
		want := ""
		if m := re.FindStringSubmatch(first); m != nil {
			want = "release-" + m[1]
		}
		if got, _ := tooOld(version); got != want {
			t.Fatalf("tooOld(%q) = %q, the pattern %q", version, got, want)
		}
	})
}

package contract

import (
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the table in docs/backend-differences.md")

// TestRows: every row names a backend other than native (native is the
// reference), a suite, a check, a result that suite knows and its
// reason; no two rows of a backend's check overlap in a profile.
func TestRows(t *testing.T) {
	profiles := []string{"permissive", "moderate", "restrictive"}
	seen := map[string]bool{}
	for _, d := range Differences() {
		if !slices.Contains(All(), d.Backend) || d.Backend == Native {
			t.Errorf("%+v: backend must be one of %v but native", d, All()[1:])
		}
		if slices.Contains(Orchestrated(), d.Backend) && d.Suite != SuiteAPI && d.Suite != SuiteNodeSDK {
			t.Errorf("%+v: only the %s and %s suites run against %s", d, SuiteAPI, SuiteNodeSDK, d.Backend)
		}
		if d.Check == "" || strings.TrimSpace(d.Why) == "" || strings.Contains(d.Why, "\n") {
			t.Errorf("%+v: a row needs its check and a one-line reason", d)
		}
		switch d.Suite {
		case SuiteAttack:
			ok := d.Want == "allowed" || d.Want == "n-a" || d.Want == "error"
			if strings.HasPrefix(d.Check, "check:") {
				ok = d.Want == Fails && d.Profiles == nil
			}
			if !ok {
				t.Errorf("%+v: an attack row wants allowed, n-a or error (a host check: fails, for every profile)", d)
			}
		case SuiteFiles, SuiteAPI, SuiteNodeSDK:
			if (d.Want != Differs && d.Want != Unsupported) || d.Profiles != nil {
				t.Errorf("%+v: a %s row wants %s or %s, for every profile", d, d.Suite, Differs, Unsupported)
			}
		default:
			t.Errorf("%+v: no suite %q", d, d.Suite)
		}
		ps := d.Profiles
		if ps == nil {
			ps = profiles
		}
		for _, p := range ps {
			if !slices.Contains(profiles, p) {
				t.Errorf("%+v: no profile %q", d, p)
			}
			k := d.Backend + "/" + d.Suite + "/" + d.Check + "/" + p
			if seen[k] {
				t.Errorf("%+v: two rows for %s", d, k)
			}
			seen[k] = true
		}
	}
}

func TestLookup(t *testing.T) {
	for _, d := range Differences() {
		p := ""
		if d.Profiles != nil {
			p = d.Profiles[0]
		} else if d.Suite == SuiteAttack {
			p = "moderate"
		}
		got, ok := Lookup(d.Backend, d.Suite, d.Check, p)
		if !ok || got.Why != d.Why {
			t.Errorf("Lookup(%s, %s, %s, %s) = %+v, %v", d.Backend, d.Suite, d.Check, p, got, ok)
		}
	}
	if _, ok := Lookup(Native, SuiteAttack, "write_root", "moderate"); ok {
		t.Error("native has a difference from itself")
	}
	if len(For(Native)) != 0 {
		t.Error("native has differences")
	}
}

// TestDocs keeps docs/backend-differences.md's table the data's
// (go test ./internal/contract -update rewrites it).
func TestDocs(t *testing.T) {
	const path = "../../docs/backend-differences.md"
	const begin, end = "<!-- BEGIN GENERATED: go test ./internal/contract -update -->\n", "<!-- END GENERATED -->\n"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no generated section (%q … %q)", path, begin, end)
	}
	want := doc[:i+len(begin)] + Markdown() + doc[j:]
	if want == doc {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is not the data's: go test ./internal/contract -update", path)
}

// TestOpenAPISuites: GET /doctor's contract rows name their suite, and
// api/openapi.yaml's enum of suites is this package's (a suite added
// here without it makes /doctor's answer one the document refuses).
func TestOpenAPISuites(t *testing.T) {
	b, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`suite: \{ enum: \[([^\]]*)\] \}`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no enum of suites in api/openapi.yaml")
	}
	var got []string
	for _, s := range strings.Split(string(m[1]), ",") {
		got = append(got, strings.TrimSpace(s))
	}
	want := []string{SuiteAttack, SuiteFiles, SuiteAPI, SuiteNodeSDK}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("api/openapi.yaml's suites %q, want %q", got, want)
	}
}

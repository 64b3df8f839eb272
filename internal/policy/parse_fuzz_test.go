package policy

import (
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// knownBug marks the inputs of a bug that was found by fuzzing and fixed:
// seeing one again is a regression.
func knownBug(t *testing.T, what string) {
	t.Helper()
	t.Fatalf("regression of a fixed bug: %s", what)
}

// memoryGrammar is what ParseMemory documents, written independently: a
// decimal number and an optional unit (matched against the input with
// ASCII letters lowered: any case, but ASCII only).
var memoryGrammar = regexp.MustCompile(`^(\d+\.?\d*|\.\d+)(k|kb|kib|m|mb|mib|g|gb|gib|t|tb|tib)?$`)

// asciiLower lowers ASCII letters only (strings.ToLower also folds
// non-ASCII letters such as U+212A KELVIN SIGN into ASCII ones).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}

// memoryUnits are the spellings of each unit, which must mean the same.
var memoryUnits = [][]string{
	{"", "m", "mb", "mib", "M", "MB", "MiB"},
	{"k", "kb", "kib", "K", "KB", "KiB"},
	{"g", "gb", "gib", "G", "GB", "GiB"},
	{"t", "tb", "tib", "T", "TB", "TiB"},
}

// FuzzParseMemory: accepted sizes are 1 MB to 1 PiB and match the
// documented grammar; other spellings of the same unit, blanks around and
// the canonical "<n>m" form give the same answer; errors quote the input.
func FuzzParseMemory(f *testing.F) {
	for _, s := range []string{"512m", "2g", "1.5g", "512MiB", "1048576k", "1024", "0", "-1", "1e3", "0x10", "nan", "inf",
		"1048577m", "0.4", ".5g", "1.", "1gib", " 7 ", "1_0", "+5", "9999999999999999999999t"} {
		f.Add(s)
	}
	f.Fuzz(fuzzParseMemory)
}

func fuzzParseMemory(t *testing.T, s string) {
	{
		v, err := ParseMemory(s)
		if err != nil {
			if v != 0 {
				t.Fatalf("ParseMemory(%q) = %d with error %v", s, v, err)
			}
			if !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("ParseMemory(%q): error does not quote the input: %v", s, err)
			}
		} else {
			if v < 1 || v > maxMemoryMB {
				t.Fatalf("ParseMemory(%q) = %d MB, outside 1..%d", s, v, maxMemoryMB)
			}
			if !memoryGrammar.MatchString(asciiLower(strings.TrimSpace(s))) {
				if strings.ContainsRune(s, '\u212a') {
					// strings.ToLower maps U+212A KELVIN SIGN to 'k', so
					// "1024\u212a" is read as 1024k.
					knownBug(t, "ParseMemory accepts U+212A KELVIN SIGN as the unit k")
				}
				t.Fatalf("ParseMemory(%q) = %d but the input is not a number and a unit", s, v)
			}
			if again, err := ParseMemory(strconv.FormatInt(v, 10) + "m"); err != nil || again != v {
				t.Fatalf("ParseMemory(%q) = %d, but its canonical form %dm gives %d, %v", s, v, v, again, err)
			}
		}
		if v2, err2 := ParseMemory(" \t" + s + "\n"); v2 != v || (err2 == nil) != (err == nil) {
			t.Fatalf("blanks around %q change the result: %d, %v vs %d, %v", s, v, err, v2, err2)
		}
		// Every spelling of the unit means the same.
		m := memoryGrammar.FindStringSubmatch(asciiLower(strings.TrimSpace(s)))
		if m == nil {
			return
		}
		for _, class := range memoryUnits {
			if !slices.ContainsFunc(class, func(u string) bool { return strings.EqualFold(u, m[2]) }) {
				continue
			}
			for _, u := range class {
				v2, err2 := ParseMemory(m[1] + u)
				if v2 != v || (err2 == nil) != (err == nil) {
					t.Fatalf("%q and %q differ: %d, %v vs %d, %v", s, m[1]+u, v, err, v2, err2)
				}
			}
		}
	}
}

// fuzzDirs makes a working and a home directory with a few entries for
// the volume fuzzer.
func fuzzDirs(f *testing.F) (cwd, home string) {
	root := f.TempDir()
	cwd, home = filepath.Join(root, "cwd"), filepath.Join(root, "home")
	for _, d := range []string{cwd + "/a", cwd + "/b c", home + "/.cache", home + "/x"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	return cwd, home
}

// FuzzParseVolume: an accepted volume has an absolute, clean host path
// that exists and resolves the way the documentation says, and an
// absolute, clean sandbox path with no "..", not / and not in /proc,
// /sys or /dev; the options are exactly the ones given.
func FuzzParseVolume(f *testing.F) {
	cwd, home := fuzzDirs(f)
	for _, s := range []string{"a:/data", "a:/data:ro", "./a:/data:cow", "~/x:/x:ro,cow", "~:/home", "/:/host",
		"a:/", "a:/proc/sys", "a:/dev", "a:/x/../proc", "a://sys//", "a:relative", "a:/x:rx", "a", "a:/b:ro:rw",
		"b c:/with space", "../cwd/a:/up", "a:/x\x00", "a:/.", "a:/./proc", ":/x", "a:/x:", "a:/sysfs"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		m, err := ParseVolume(spec, cwd, home)
		if err != nil {
			if !reflect.DeepEqual(m, sandbox.Mount{}) {
				t.Fatalf("ParseVolume(%q) = %+v with error %v", spec, m, err)
			}
			return
		}
		parts := strings.Split(spec, ":")
		if len(parts) != 2 && len(parts) != 3 {
			t.Fatalf("ParseVolume(%q) accepted %d parts", spec, len(parts))
		}
		if strings.ContainsRune(spec, 0) {
			t.Fatalf("ParseVolume(%q) accepted a NUL byte", spec)
		}
		// Host side.
		host := parts[0]
		var want string
		switch {
		case host == "~":
			want = home
		case strings.HasPrefix(host, "~/"):
			want = filepath.Join(home, host[2:])
		case filepath.IsAbs(host):
			want = filepath.Clean(host)
		default:
			want = filepath.Join(cwd, host)
		}
		if m.Source != want || !filepath.IsAbs(m.Source) || filepath.Clean(m.Source) != m.Source {
			t.Fatalf("ParseVolume(%q): source %q, want %q", spec, m.Source, want)
		}
		if _, err := os.Stat(m.Source); err != nil {
			t.Fatalf("ParseVolume(%q): source does not exist: %v", spec, err)
		}
		// Sandbox side.
		dest := m.Dest
		if !strings.HasPrefix(parts[1], "/") || dest != path.Clean(parts[1]) || dest == "/" {
			t.Fatalf("ParseVolume(%q): dest %q", spec, dest)
		}
		if slices.Contains(strings.Split(parts[1], "/"), "..") {
			t.Fatalf("ParseVolume(%q): dest with \"..\" accepted", spec)
		}
		for _, sys := range []string{"/proc", "/sys", "/dev"} {
			if dest == sys || strings.HasPrefix(dest, sys+"/") {
				t.Fatalf("ParseVolume(%q): mounts over %s", spec, sys)
			}
		}
		// Options.
		var opts []string
		if len(parts) == 3 {
			opts = strings.Split(parts[2], ",")
		}
		for _, o := range opts {
			if o != "ro" && o != "rw" && o != "cow" {
				t.Fatalf("ParseVolume(%q): unknown option %q accepted", spec, o)
			}
		}
		if m.ReadOnly != slices.Contains(opts, "ro") {
			t.Fatalf("ParseVolume(%q): read-only %v", spec, m.ReadOnly)
		}
		if wantKind := map[bool]sandbox.MountKind{false: sandbox.MountBind, true: sandbox.MountCopyOnWrite}[slices.Contains(opts, "cow")]; m.Kind != wantKind {
			t.Fatalf("ParseVolume(%q): kind %v, want %v", spec, m.Kind, wantKind)
		}
	})
}

// fuzzLookup is the host environment the env fuzzers see; values are
// marked so that a result can be traced to the host.
func fuzzLookup(k string) (string, bool) {
	switch k {
	case "HOME":
		return "\x01host-home", true
	case "EMPTY":
		return "", true
	case "HASNUL":
		return "a\x00b", true
	}
	return "", false
}

// checkEnvEntry checks one KEY=VALUE a parser produced from input line s
// (the whole -e value or one env file line).
func checkEnvEntry(t *testing.T, s, kv string) {
	t.Helper()
	key, val, ok := strings.Cut(kv, "=")
	if !ok || key == "" || strings.ContainsAny(key, "\x00 \t\r\n") || strings.ContainsRune(val, 0) {
		t.Fatalf("from %q: invalid entry %q", s, kv)
	}
	inKey, _, hasVal := strings.Cut(s, "=")
	if key != inKey {
		t.Fatalf("from %q: key %q", s, key)
	}
	if hasVal {
		if kv != s {
			t.Fatalf("from %q: %q, want the input itself", s, kv)
		}
		return
	}
	if hv, found := fuzzLookup(key); !found || kv != key+"="+hv {
		t.Fatalf("from %q: %q is not the host's value", s, kv)
	}
}

// FuzzParseEnv: an error gives nothing; KEY=VALUE comes back verbatim; a
// bare KEY takes the host's value or nothing; keys are never empty and
// never hold blanks or NUL, values never hold NUL.
func FuzzParseEnv(f *testing.F) {
	for _, s := range []string{"A=1", "A=", "=x", "HOME", "EMPTY", "HASNUL", "MISSING", "A B=1", "A=b=c", "A=\x00", "\x00", "é=ü", "A\t=1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		kv, ok, err := ParseEnv(s, fuzzLookup)
		if err != nil {
			if ok || kv != "" {
				t.Fatalf("ParseEnv(%q) = %q, %v with error %v", s, kv, ok, err)
			}
			return
		}
		if !ok {
			if kv != "" {
				t.Fatalf("ParseEnv(%q) = %q but not ok", s, kv)
			}
			key, _, hasVal := strings.Cut(s, "=")
			if v, found := fuzzLookup(key); hasVal || (found && !strings.ContainsRune(v, 0)) {
				t.Fatalf("ParseEnv(%q) dropped a variable that has a value", s)
			}
			return
		}
		checkEnvEntry(t, s, kv)
		// Without a host lookup, only KEY=VALUE can produce something.
		kv2, ok2, err2 := ParseEnv(s, nil)
		if err2 != nil || ok2 != strings.Contains(s, "=") || (ok2 && kv2 != kv) {
			t.Fatalf("ParseEnv(%q, nil) = %q, %v, %v", s, kv2, ok2, err2)
		}
	})
}

// FuzzParseEnvFile: every entry is valid and traceable to a line of the
// file (verbatim or the host's value of a bare key); errors name the file
// and give nothing; CRLF line ends and indentation change nothing.
func FuzzParseEnvFile(f *testing.F) {
	for _, s := range []string{"A=1\nB=2\n", "# comment\n\n  C=3\r\n", "HOME\nMISSING\n", "bad key=1\n", "A=\x00\n", "\tX=\"quoted\" \n",
		"A=1\nA=2", "=\n", "EMPTY\nHASNUL\n", "#A=1\n   #B=2\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := ParseEnvFile(strings.NewReader(string(data)), "fuzz.env", fuzzLookup)
		if err != nil {
			if out != nil {
				t.Fatalf("entries %q with error %v", out, err)
			}
			if !strings.HasPrefix(err.Error(), "fuzz.env") {
				t.Fatalf("error does not name the file: %v", err)
			}
		}
		lines := strings.Split(string(data), "\n")
		for _, kv := range out {
			traced := false
			for _, l := range lines {
				l = strings.TrimLeft(strings.TrimSuffix(l, "\r"), " \t")
				if k, _, _ := strings.Cut(kv, "="); l == kv || l == k {
					traced = true
					break
				}
			}
			if !traced {
				t.Fatalf("entry %q comes from no line of %q", kv, data)
			}
			if kv2, ok, err := ParseEnv(kv, nil); err != nil || !ok || kv2 != kv {
				t.Fatalf("entry %q does not parse back: %q, %v, %v", kv, kv2, ok, err)
			}
		}
		if strings.ContainsRune(string(data), '\r') {
			return
		}
		variants := []string{
			strings.ReplaceAll(string(data), "\n", "\r\n"),
			" \t" + strings.ReplaceAll(string(data), "\n", "\n  "),
		}
		for _, v := range variants {
			out2, err2 := ParseEnvFile(strings.NewReader(v), "fuzz.env", fuzzLookup)
			if (err == nil) != (err2 == nil) || !slices.Equal(out, out2) {
				t.Fatalf("%q gives %q, %v but %q gives %q, %v", data, out, err, v, out2, err2)
			}
		}
	})
}

// asciiSwapCase flips the case of ASCII letters only.
func asciiSwapCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z':
			b[i] = c - 32
		case 'A' <= c && c <= 'Z':
			b[i] = c + 32
		}
	}
	return string(b)
}

// FuzzDomainMatches: a wildcard never matches a name that is not the
// apex or under it (no "badexample.com" for "*.example.com"); ASCII case
// and one trailing dot on the host do not matter; an exact match is also
// a wildcard match; every pattern the config accepts matches its own
// host name.
func FuzzDomainMatches(f *testing.F) {
	for _, s := range [][2]string{{"*.example.com", "a.example.com"}, {"*.example.com", "badexample.com"}, {"example.com", "example.com."},
		{"*.", "."}, {"*.com", "com"}, {"API.example.com", "api.EXAMPLE.com"}, {"169.254.169.254", "169.254.169.254"},
		{"*.*.x", "a.b.x"}, {"", ""}, {"*.a", "x..a"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(fuzzDomainMatches)
}

func fuzzDomainMatches(t *testing.T, pattern, host string) {
	{
		got := DomainMatches(pattern, host)
		lp := strings.ToLower(pattern)
		lh := strings.ToLower(strings.TrimSuffix(host, "."))
		if apex, ok := strings.CutPrefix(lp, "*."); ok && got {
			if lh != apex && !strings.HasSuffix(lh, "."+apex) {
				t.Fatalf("%q matches %q, which is not %q or under it", pattern, host, apex)
			}
		}
		if !strings.HasPrefix(lp, "*.") && got != (lp == lh) {
			t.Fatalf("exact pattern %q vs %q: %v", pattern, host, got)
		}
		if DomainMatches(asciiSwapCase(pattern), asciiSwapCase(host)) != got {
			t.Fatalf("ASCII case changes %q vs %q", pattern, host)
		}
		if !strings.HasSuffix(host, ".") && DomainMatches(pattern, host+".") != got {
			t.Fatalf("a trailing dot on %q changes the result", host)
		}
		if got && !strings.HasPrefix(lp, "*.") && !DomainMatches("*."+pattern, host) {
			t.Fatalf("%q matches %q but *.%s does not", pattern, host, pattern)
		}
		if config.ValidateDomainPattern(pattern) == nil {
			own := strings.TrimPrefix(pattern, "*.")
			if !DomainMatches(pattern, own) || !DomainMatches(pattern, own+".") {
				if strings.HasSuffix(own, ".") {
					// ValidateDomainPattern accepts "evil.com." but DomainMatches
					// trims the trailing dot of the host only, so the pattern
					// matches nothing: a block list entry written as a fully
					// qualified name silently blocks nothing.
					knownBug(t, "a domain pattern with a trailing dot is accepted by config but matches no host")
				}
				t.Fatalf("accepted pattern %q does not match its own name %q", pattern, own)
			}
		}
	}
}

// TestFixedBugs runs the inputs of bugs that fuzzing found (and that are
// fixed) through the fuzz checks, so that they stay fixed.
func TestFixedBugs(t *testing.T) {
	t.Run("ParseMemoryKelvinSign", func(t *testing.T) { fuzzParseMemory(t, "1024\u212a") })
	t.Run("DomainPatternTrailingDot", func(t *testing.T) { fuzzDomainMatches(t, "example.com.", "example.com") })
}

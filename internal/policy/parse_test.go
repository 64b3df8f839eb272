package policy

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

func TestParseMemory(t *testing.T) {
	good := map[string]int64{
		"512m": 512, "512M": 512, "512mb": 512, "512MiB": 512, "2g": 2048, "2G": 2048, "2gb": 2048,
		"1.5g": 1536, "1024": 1024, " 64 ": 64, "1048576k": 1024, "1t": 1024 * 1024, ".5g": 512,
	}
	for in, want := range good {
		if got, err := ParseMemory(in); err != nil || got != want {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	bad := map[string]string{
		"": "empty", "0": "positive", "0m": "positive", "-5": "positive", "-1g": "positive",
		"lots": "not a number", "12q": "not a number", "12mx": "not a number", "5kg": "unknown unit", "1e3": "not a number", "0x10": "not a number",
		"nan": "not a number", "inf": "not a number", "1k": "smaller than one megabyte",
		"99999999999g": "too large", "5 m": "not a number", "m": "not a number", "1.2.3m": "not a number",
	}
	for in, msg := range bad {
		_, err := ParseMemory(in)
		if err == nil || !strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), "512m") {
			t.Errorf("ParseMemory(%q) = %v, want an error about %q with an example", in, err, msg)
		}
	}
}

func TestParseVolume(t *testing.T) {
	cwd, home := t.TempDir(), t.TempDir()
	os.Mkdir(filepath.Join(cwd, "data"), 0o755)
	os.Mkdir(filepath.Join(home, "cache"), 0o755)
	file := filepath.Join(cwd, "f.txt")
	os.WriteFile(file, nil, 0o644)

	good := []struct {
		in   string
		want sandbox.Mount
	}{
		{cwd + ":/src", sandbox.Mount{Kind: sandbox.MountBind, Source: cwd, Dest: "/src"}},
		{cwd + ":/src:ro", sandbox.Mount{Kind: sandbox.MountBind, Source: cwd, Dest: "/src", ReadOnly: true}},
		{cwd + ":/src:rw", sandbox.Mount{Kind: sandbox.MountBind, Source: cwd, Dest: "/src"}},
		{cwd + ":/src:cow", sandbox.Mount{Kind: sandbox.MountCopyOnWrite, Source: cwd, Dest: "/src"}},
		{"data:/d/", sandbox.Mount{Kind: sandbox.MountBind, Source: filepath.Join(cwd, "data"), Dest: "/d"}},
		{"./data/../data:/d", sandbox.Mount{Kind: sandbox.MountBind, Source: filepath.Join(cwd, "data"), Dest: "/d"}},
		{"~/cache:/c:ro", sandbox.Mount{Kind: sandbox.MountBind, Source: filepath.Join(home, "cache"), Dest: "/c", ReadOnly: true}},
		{file + ":/etc/f.txt:ro", sandbox.Mount{Kind: sandbox.MountBind, Source: file, Dest: "/etc/f.txt", ReadOnly: true}},
	}
	for _, tt := range good {
		got, err := ParseVolume(tt.in, cwd, home)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseVolume(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	bad := map[string]string{
		cwd:                   "two or three",
		cwd + ":/a:ro:x":      "two or three",
		":/a":                 "empty host path",
		cwd + ":rel":          "must be absolute",
		cwd + ":/a/../etc":    `".."`,
		cwd + ":/":            "root",
		cwd + ":/proc":        "/proc",
		cwd + ":/sys/fs":      "/sys",
		cwd + ":/dev/":        "/dev",
		cwd + ":/a:rx":        "unknown option",
		"/nonexistent-xyz:/a": "does not exist",
		"missing-dir:/a":      "does not exist",
		cwd + ":/a\x00b":      "NUL",
	}
	for in, msg := range bad {
		_, err := ParseVolume(in, cwd, home)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseVolume(%q) = %v, want an error about %q", in, err, msg)
		}
	}
	if _, err := ParseVolume("~/x:/x", cwd, ""); err == nil {
		t.Error("~ accepted without a home directory")
	}
	// /procfs is not /proc.
	if _, err := ParseVolume(cwd+":/procfs", cwd, home); err != nil {
		t.Errorf("/procfs rejected: %v", err)
	}
}

func TestParseEnvFile(t *testing.T) {
	host := func(k string) (string, bool) {
		if k == "HOSTVAR" {
			return "hv", true
		}
		return "", false
	}
	in := "# comment\n\n  A=1\nB=two words\r\nC=\"quoted\"\nD=\nHOSTVAR\nMISSING\n   # indented comment\nE=x=y\n"
	got, err := ParseEnvFile(strings.NewReader(in), "vars.env", host)
	if err != nil {
		t.Fatal(err)
	}
	want := `A=1|B=two words|C="quoted"|D=|HOSTVAR=hv|E=x=y`
	if strings.Join(got, "|") != want {
		t.Errorf("got %q, want %q", strings.Join(got, "|"), want)
	}
	for in, msg := range map[string]string{
		"A=1\n=oops\n": "vars.env:2:",
		"BAD KEY=1\n":  "white space",
		"A=\x00\n":     "NUL",
	} {
		if _, err := ParseEnvFile(strings.NewReader(in), "vars.env", host); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseEnvFile(%q) = %v, want %q", in, err, msg)
		}
	}
	big := strings.NewReader(strings.Repeat("A=1\n", maxEnvFileSize/4+1))
	if _, err := ParseEnvFile(big, "big.env", host); err == nil {
		t.Error("oversized env file accepted")
	}
}

func TestParseEnv(t *testing.T) {
	host := func(k string) (string, bool) { return "v", k == "SET" }
	tests := []struct {
		in, kv string
		ok     bool
		err    bool
	}{
		{"K=V", "K=V", true, false},
		{"K=", "K=", true, false},
		{"K=a=b", "K=a=b", true, false},
		{"SET", "SET=v", true, false},
		{"UNSET", "", false, false},
		{"=V", "", false, true},
		{"", "", false, true},
		{"A B=1", "", false, true},
	}
	for _, tt := range tests {
		kv, ok, err := ParseEnv(tt.in, host)
		if kv != tt.kv || ok != tt.ok || (err != nil) != tt.err {
			t.Errorf("ParseEnv(%q) = %q, %v, %v", tt.in, kv, ok, err)
		}
	}
}

// TestCommandRulesCheck: [security.commands] as CommandRules makes it,
// applied by the rules' Check the way sandbox.Manager applies them.
func TestCommandRulesCheck(t *testing.T) {
	block := config.Commands{Block: []string{"curl", "/usr/bin/wget"}}
	allow := config.Commands{Allow: []string{"python3", "/bin/sh"}, AllowlistOnly: true}
	tests := []struct {
		c    config.Commands
		args []string
		ok   bool
	}{
		{block, []string{"ls"}, true},
		{block, []string{"curl", "x"}, false},
		{block, []string{"/opt/bin/curl"}, false},
		{block, []string{"/usr/bin/wget"}, false},
		{block, []string{"wget"}, true}, // blocked by full path only
		{block, nil, true},
		{allow, []string{"python3", "x.py"}, true},
		{allow, []string{"/usr/local/bin/python3"}, true},
		{allow, []string{"/bin/sh", "-c", "curl x"}, true}, // the documented bypass
		{allow, []string{"node"}, false},
		{allow, []string{"curl -s"}, false},
		{config.Commands{Block: []string{"rm"}}, []string{"rm -rf /"}, false},
	}
	for _, tt := range tests {
		cfg := config.Defaults()
		cfg.Security.Commands = tt.c
		err := CommandRules(cfg).Check(tt.args)
		if (err == nil) != tt.ok {
			t.Errorf("rules %+v, %q: %v", tt.c, tt.args, err)
		}
		if err != nil && (!errors.Is(err, sandbox.ErrCommandRefused) || !errors.Is(err, sandbox.ErrCannotInvoke)) {
			t.Errorf("rules %+v, %q: %v: not a command refusal", tt.c, tt.args, err)
		}
	}
}

func TestDomainMatches(t *testing.T) {
	tests := []struct {
		pattern, host string
		want          bool
	}{
		{"*.example.com", "example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"*.example.com", "badexample.com", false},
		{"example.com", "example.com.", true},
		{"example.com", "a.example.com", false},
		{"API.example.com", "api.EXAMPLE.com", true},
		{"169.254.169.254", "169.254.169.254", true},
	}
	for _, tt := range tests {
		if got := DomainMatches(tt.pattern, tt.host); got != tt.want {
			t.Errorf("DomainMatches(%q, %q) = %v", tt.pattern, tt.host, got)
		}
	}
}

func TestValidateHostname(t *testing.T) {
	for _, ok := range []string{"a", "agentkernel", "box-1.local", strings.Repeat("a", 63)} {
		if err := ValidateHostname(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "a-", ".a", "a.", "a_b", "a b", strings.Repeat("a", 64)} {
		if ValidateHostname(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

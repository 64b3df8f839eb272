package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/policy"
)

// runCLI runs the root command with args in dir and returns stdout,
// stderr and the error.
func runCLI(t *testing.T, dir string, args ...string) (string, string, error) {
	t.Helper()
	t.Chdir(dir)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, ".no-user-config"))
	var out, errb bytes.Buffer
	a := NewApp(runcli.App{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	root := NewRootCommand(a)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errb.String(), err
}

func TestDetectCommand(t *testing.T) {
	dir := t.TempDir()
	out, _, err := runCLI(t, dir, "detect", "--", "python3", "x.py")
	if err != nil || !strings.Contains(out, "python:3.12-alpine") || !strings.Contains(out, "command") {
		t.Fatalf("detect -- python3 x.py: %q %v", out, err)
	}
	// Flags after the command belong to it.
	out, _, err = runCLI(t, dir, "detect", "node", "-e", "1")
	if err != nil || !strings.HasPrefix(out, "node:22-alpine") {
		t.Errorf("detect node -e 1: %q %v", out, err)
	}
	out, _, _ = runCLI(t, dir, "detect", "--image", "busybox", "--", "python3")
	if !strings.HasPrefix(out, "busybox  (rule: flag)") {
		t.Errorf("--image: %q", out)
	}
	os.WriteFile(filepath.Join(dir, "agentkernel.toml"), []byte("[sandbox]\nruntime = \"go\"\n"), 0o644)
	out, _, _ = runCLI(t, dir, "detect", "--json", "--", "python3")
	var r struct{ Image, Rule, Detail string }
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Image != "golang:1.23-alpine" || r.Rule != "config" {
		t.Errorf("config rule: %q %v", out, err)
	}
	out, _, err = runCLI(t, dir, "detect", "--table")
	if err != nil || !strings.Contains(out, "hashicorp/terraform:1.10") || !strings.Contains(out, "*.csproj") {
		t.Errorf("--table: %v\n%s", err, out)
	}
}

func TestInitThenConfigShow(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "My Project")
	os.Mkdir(dir, 0o755)
	out, _, err := runCLI(t, dir, "init", "--agent", "codex")
	if err != nil || !strings.Contains(out, "agentkernel.toml") {
		t.Fatalf("init: %q %v", out, err)
	}
	_, _, err = runCLI(t, dir, "init")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitAgentkernel || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("second init: %v", err)
	}

	out, stderr, err := runCLI(t, dir, "config", "show")
	if err != nil || stderr != "" {
		t.Fatalf("config show: %v %q", err, stderr)
	}
	for _, want := range []string{
		`sandbox.name`, `"My-Project"`, "project agentkernel.toml:", `agent.preferred`, `"codex"`,
		"security.profile", "resources.memory_mb", "unset (profile decides)", "default",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("config show lacks %q:\n%s", want, out)
		}
	}

	out, _, err = runCLI(t, dir, "config", "show", "--json")
	var doc struct {
		Files  []struct{ Kind, Path string }
		Values []struct {
			Key    string
			Source struct {
				Kind string
				Line int
			}
		}
	}
	if err != nil || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Files) != 1 || len(doc.Values) < 40 {
		t.Fatalf("config show --json: %v\n%s", err, out)
	}
	for _, v := range doc.Values {
		if v.Key == "sandbox.name" && (v.Source.Kind != "project" || v.Source.Line == 0) {
			t.Errorf("sandbox.name source = %+v", v.Source)
		}
	}
}

func TestLoadConfigErrors(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "agentkernel.toml"), []byte("[resources]\nmemory_mb = -1\nbogus = 2\n"), 0o644)
	_, stderr, err := runCLI(t, dir, "config", "show")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitAgentkernel || !strings.Contains(err.Error(), "agentkernel.toml:2") {
		t.Errorf("bad value: %v", err)
	}
	if !strings.Contains(stderr, `agentkernel.toml:3: unknown key "resources.bogus"`) {
		t.Errorf("warning missing: %q", stderr)
	}
	_, _, err = runCLI(t, dir, "--config", "missing.toml", "detect")
	if !errors.As(err, &ee) || ee.Code != ExitAgentkernel || !strings.Contains(ee.Hint, "--config") {
		t.Errorf("missing --config: %v", err)
	}
}

func TestProfilesCommand(t *testing.T) {
	out, _, err := runCLI(t, t.TempDir(), "profiles")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"permissive", "moderate (default)", "restrictive", "copy-on-write", "2048 MB", "100% of one core",
		"CHOWN SETUID SETGID DAC_OVERRIDE FOWNER KILL", "read-only, tmpfs /tmp", "ANTHROPIC_API_KEY", "169.254.169.254",
		"refused in every mode\nunless --allow-cidr names them", "an address only until --allow-cidr names it"} {
		if !strings.Contains(out, want) {
			t.Errorf("profiles lacks %q", want)
		}
	}
	out, _, err = runCLI(t, t.TempDir(), "profiles", "--json")
	var doc struct{ Profiles, Modes []map[string]any }
	if err != nil || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Profiles) != 3 || len(doc.Modes) != 4 {
		t.Errorf("profiles --json: %v %s", err, out)
	}
}

func TestBindSpecFlags(t *testing.T) {
	var o policy.Overrides
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	runcli.BindSpecFlags(fs, &o)
	err := fs.Parse([]string{
		"-i", "alpine:3.20", "--pull", "never", "-p", "restrictive", "--mode", "claude",
		"-e", "A=1", "-e", "B", "--env-file", "x.env", "-w", "/src", "-v", "/a:/b:ro", "-v", "/c:/d",
		"-t", "--interactive", "--memory", "1g", "--cpus", "1.5", "--pids", "99", "--timeout", "90",
		"--no-network", "--read-only", "-u", "1000", "--hostname", "h", "-k", "--userns", "host",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := policy.Overrides{
		Image: "alpine:3.20", Pull: "never", Profile: "restrictive", Mode: "claude",
		Env: []string{"A=1", "B"}, EnvFiles: []string{"x.env"}, Workdir: "/src", Volumes: []string{"/a:/b:ro", "/c:/d"},
		TTY: true, Interactive: true, Memory: "1g", CPUs: 1.5, PIDs: 99, Timeout: 90 * time.Second,
		NoNetwork: true, ReadOnly: true, User: "1000", Hostname: "h", Keep: true, HostUserNS: true,
	}
	if !equalOverrides(o, want) {
		t.Errorf("parsed %+v\nwant   %+v", o, want)
	}
	for _, bad := range [][]string{{"--userns", "maybe"}, {"--timeout", "5x"}, {"--cpus", "many"}} {
		fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
		fs.SetOutput(&bytes.Buffer{})
		runcli.BindSpecFlags(fs, &policy.Overrides{})
		if err := fs.Parse(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	// --timeout takes durations too; defaults leave the profile in charge.
	var d policy.Overrides
	fs = pflag.NewFlagSet("run", pflag.ContinueOnError)
	runcli.BindSpecFlags(fs, &d)
	if err := fs.Parse([]string{"--timeout", "5m"}); err != nil || d.Timeout != 5*time.Minute {
		t.Errorf("--timeout 5m: %v %v", d.Timeout, err)
	}
	if d.Pull != "missing" || d.Profile != "" || d.Memory != "" || d.HostUserNS {
		t.Errorf("defaults: %+v", d)
	}
}

func equalOverrides(a, b policy.Overrides) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

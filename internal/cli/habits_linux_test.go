package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// completions runs cobra's completion request for line (the words after
// the program name, the last one the word being completed) against data
// directory dir, as a shell's completion script does, and returns the
// words offered and the directive line.
func completions(t *testing.T, dir string, line ...string) (words []string, directive string) {
	t.Helper()
	argv := append([]string{"__complete", "--data-dir", dir}, line...)
	out, stderr, code := fullRun(argv...)
	if code != 0 {
		t.Fatalf("%q: exit %d\n%s%s", line, code, out, stderr)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, ":") {
			directive = l
			continue
		}
		w, _, _ := strings.Cut(l, "\t")
		words = append(words, w)
	}
	return words, directive
}

// TestDynamicCompletion: shell completion offers the data directory's
// sandbox names where a command takes one (not those already given, not a
// directory that is not a sandbox's), images for --image, and the
// profiles, modes and network modes for their flags, on run (whose
// command line runcli parses) as on the commands cobra parses.
func TestDynamicCompletion(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	for _, n := range []string{"dev", "box", "bad..name"} {
		if err := os.MkdirAll(filepath.Join(dir, "sandboxes", n), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "sandboxes", "afile"), nil, 0o600)
	const noFiles = ":4"
	for _, c := range []struct {
		line      []string
		want      []string
		directive string
	}{
		{[]string{"stop", ""}, []string{"box", "dev"}, noFiles},
		{[]string{"stop", "dev", ""}, []string{"box"}, noFiles},
		{[]string{"start", "d"}, []string{"box", "dev"}, noFiles}, // the shell filters by prefix
		{[]string{"rm", ""}, []string{"box", "dev"}, noFiles},
		{[]string{"sandbox", "rm", "-f", "box", ""}, []string{"dev"}, noFiles},
		{[]string{"sandbox", "info", ""}, []string{"box", "dev"}, noFiles},
		{[]string{"sandbox", "info", "box", ""}, nil, noFiles},
		{[]string{"logs", ""}, []string{"box", "dev"}, noFiles},
		{[]string{"exec", ""}, []string{"box", "dev"}, noFiles},
		{[]string{"exec", "-e", "A=1", ""}, []string{"box", "dev"}, noFiles},
		{[]string{"exec", "dev", ""}, nil, ":0"},
		{[]string{"attach", ""}, []string{"box", "dev"}, noFiles},
		{[]string{"stats", "box", ""}, []string{"dev"}, noFiles},
		{[]string{"cp", ""}, []string{"box:", "dev:"}, ":2"},
		{[]string{"run", "--profile", ""}, []string{"permissive", "moderate", "restrictive"}, noFiles},
		{[]string{"run", "-p", ""}, []string{"permissive", "moderate", "restrictive"}, noFiles},
		{[]string{"run", "--mode", ""}, []string{"native", "claude", "codex", "gemini"}, noFiles},
		{[]string{"run", "--compatibility-mode", ""}, []string{"native", "claude", "codex", "gemini"}, noFiles},
		{[]string{"run", "--network", ""}, []string{"none", "filtered", "full"}, noFiles},
		{[]string{"sandbox", "create", "x", "--profile", ""}, []string{"permissive", "moderate", "restrictive"}, noFiles},
		{[]string{"sandbox", "create", "--mode", ""}, []string{"native", "claude", "codex", "gemini"}, noFiles},
	} {
		got, d := completions(t, dir, c.line...)
		if !slices.Equal(got, c.want) || d != c.directive {
			t.Errorf("%q: %q %s, want %q %s", c.line, got, d, c.want, c.directive)
		}
	}
	// Images: detection's, cached or not (no image store here yet).
	for _, line := range [][]string{{"run", "-i", ""}, {"run", "--image", ""}, {"sandbox", "create", "--image", ""}} {
		got, d := completions(t, dir, line...)
		if !slices.Contains(got, "python:3.12-alpine") || !slices.Contains(got, "alpine:3.20") || !slices.Contains(got, "host") || d != noFiles {
			t.Errorf("%q: %q %s", line, got, d)
		}
	}
	// No data directory: nothing offered, no error.
	if got, d := completions(t, filepath.Join(dir, "none"), "stop", ""); len(got) != 0 || d != noFiles {
		t.Errorf("no data directory: %q %s", got, d)
	}
}

// TestDockerHabitsCommandLine: docker's names (ps, rm, logs, several
// names to start/stop/rm) and exec without a command, on a data directory
// without those sandboxes: each name is reported, the exit status is 125,
// and exec says what is missing.
func TestDockerHabitsCommandLine(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	out, stderr, code := fullRun("--data-dir", dir, "ps")
	if code != 0 || !strings.HasPrefix(out, "NAME") || stderr != "" {
		t.Errorf("ps: %d %q %q", code, out, stderr)
	}
	out, stderr, code = fullRun("--data-dir", dir, "ps", "-a")
	if code != 0 || !strings.HasPrefix(out, "NAME") {
		t.Errorf("ps -a: %d %q %q", code, out, stderr)
	}
	for _, verb := range []string{"stop", "start", "rm", "remove", "sandbox stop", "sandbox start", "sandbox rm"} {
		argv := append(append([]string{"--data-dir", dir}, strings.Fields(verb)...), "nope1", "nope2", "bad..name")
		out, stderr, code := fullRun(argv...)
		if code != 125 || out != "" || strings.Count(stderr, "not found") != 2 || !strings.Contains(stderr, `sandbox name "bad..name"`) ||
			!strings.Contains(stderr, "3 of 3 sandboxes failed") {
			t.Errorf("%s with three failing names: %d %q %q", verb, code, out, stderr)
		}
		// One name: its own error and hint, as before.
		argv = append(append([]string{"--data-dir", dir}, strings.Fields(verb)...), "nope1")
		_, stderr, code = fullRun(argv...)
		if code != 125 || !strings.Contains(stderr, `sandbox "nope1" not found`) || !strings.Contains(stderr, "hint: see 'agentkernel sandbox list --all'") || strings.Contains(stderr, "failed") {
			t.Errorf("%s nope1: %d %q", verb, code, stderr)
		}
	}
	if out, _, code := fullRun("--data-dir", dir, "sandbox", "create", "--help"); code != 0 || !strings.Contains(out, "-m, --memory") {
		t.Errorf("sandbox create --help has no -m: %d %q", code, out)
	}
	if _, stderr, code := fullRun("--data-dir", dir, "logs", "nope"); code != 125 || !strings.Contains(stderr, `sandbox "nope" not found`) {
		t.Errorf("logs of an unknown sandbox: %d %q", code, stderr)
	}
	if _, stderr, code := fullRun("--data-dir", dir, "logs"); code != 125 || !strings.HasPrefix(stderr, "agentkernel: logs: no sandbox NAME given\nusage: agentkernel logs [flags] NAME\n") {
		t.Errorf("logs without a name: %d %q", code, stderr)
	}
	for argv, want := range map[string]string{
		"exec dev":                            "agentkernel: exec: no COMMAND given to run in sandbox \"dev\"\nusage: agentkernel exec [flags] NAME [--] COMMAND [ARG...]\nhint: see 'agentkernel exec --help'",
		"exec -i dev --":                      "agentkernel: exec: no COMMAND given to run in sandbox \"dev\"\nusage: agentkernel exec",
		"exec":                                "agentkernel: exec: no sandbox NAME and no COMMAND given\nusage: agentkernel exec [flags] NAME [--] COMMAND [ARG...]",
		"attach":                              "agentkernel: attach: no sandbox NAME given\nusage: agentkernel attach [flags] NAME",
		"run --template pyhton -- python3 -V": "agentkernel: template \"pyhton\" not found (did you mean python?)\nhint: see 'agentkernel template list'",
		"run --fast -k true":                  "agentkernel: cannot use --fast with --keep (pooled sandboxes are ephemeral)",
	} {
		out, stderr, code := fullRun(append([]string{"--data-dir", dir}, strings.Fields(argv)...)...)
		if code != 125 || out != "" || !strings.HasPrefix(stderr, want) {
			t.Errorf("%s: %d %q %q, want %q", argv, code, out, stderr, want)
		}
	}
}

func TestLastLines(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 0, "a\nb\nc\n"},
		{"a\nb\nc\n", 1, "c\n"},
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc\n", 3, "a\nb\nc\n"},
		{"a\nb\nc\n", 9, "a\nb\nc\n"},
		{"a\nb\nc", 1, "c"},
		{"", 2, ""},
	} {
		if got := string(lastLines([]byte(c.in), c.n)); got != c.want {
			t.Errorf("lastLines(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

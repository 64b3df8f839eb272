package cli

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/agentkernel/agentkernel/internal/backend/native/prestart"
	"github.com/agentkernel/agentkernel/internal/cli/runcli"
)

// TestRunFlagsKnownToPrestart: package prestart reads a run's command
// line before anything else (to decide whether to make the sandbox thread
// during start-up), so it must know which of run's flags and the global
// ones take a value and what each one-letter flag stands for. A flag
// added to run without telling prestart fails here.
func TestRunFlagsKnownToPrestart(t *testing.T) {
	a := &runcli.App{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard}
	root := newBaseRoot(a)
	run, _, err := root.Find([]string{"run"})
	if err != nil {
		t.Fatal(err)
	}
	check := func(f *pflag.Flag) {
		takes := f.NoOptDefVal == "" && f.Value.Type() != "bool"
		if got := prestart.FlagTakesValue(f.Name); got != takes {
			t.Errorf("--%s: prestart.FlagTakesValue = %v, but the flag takes a value: %v", f.Name, got, takes)
		}
		if f.Shorthand != "" {
			if got := prestart.FlagForShorthand(f.Shorthand[0]); got != f.Name {
				t.Errorf("-%s: prestart.FlagForShorthand = %q, want %q", f.Shorthand, got, f.Name)
			}
		}
	}
	run.InitDefaultHelpFlag()
	run.Flags().VisitAll(check)
	root.PersistentFlags().VisitAll(check)
	n := 0
	run.Flags().VisitAll(func(*pflag.Flag) { n++ })
	if n < 20 {
		t.Fatalf("run has %d flags: the test does not see them", n)
	}
}

// TestLeanRunParse: the agentkernel binary parses a run's command line
// with pflag alone (runcli.App.Execute). For every form it accepts, the
// resolved sandbox (--dry-run) and the global flags come out exactly as
// through the cobra command line of agentkernel-full; every other form is
// ErrNeedsFull, which hands it to agentkernel-full.
func TestLeanRunParse(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	if err := os.WriteFile("env.txt", []byte("FROM_FILE=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("other.toml", []byte("[resources]\nmemory_mb = 300\ntimeout = \"2m\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	accepted := [][]string{
		{"run", "true"},
		{"run"},
		{"--data-dir", data, "run", "--image", "alpine:3.20", "--", "sh", "-c", "exit 3"},
		{"-q", "run", "-e", "A=1", "-e", "B=2", "-v", dir + ":/data:ro", "python3", "-c", "print(1)"},
		{"--config=other.toml", "run", "--memory", "64m", "--cpus", "0.5", "--timeout", "30s", "-t", "--interactive", "sh"},
		{"-cother.toml", "run", "x"},
		{"-c", "other.toml", "--quiet=true", "run", "x"},
		{"-c=other.toml", "--quiet=false", "-q", "run", "x"},
		{"run", "--no-network", "--read-only", "-u", "1000:1000", "-w", "/w", "--hostname", "h", "-k", "--userns", "host",
			"--no-daemon", "-B", "native", "--pull", "never", "-p", "restrictive", "--mode", "codex", "--env-file", "env.txt", "--pids", "10", "--", "x", "-y"},
		{"--log-level", "debug", "run", "--data-dir", data, "-i", "alpine:3.20", "cat", "--image", "not-a-flag-here"},
		{"--data-dir", "run", "run", "true"}, // a data dir called run
		{"run", "--timeout=5", "--memory=1g", "--profile=permissive", "--", "--"},
		{"--config", "other.toml", "run", "--timeout", "0", "x"}, // given as 0: no timeout, not the file's 2m
	}
	for _, argv := range accepted {
		// --dry-run right after "run": print the resolved spec.
		i := slices.Index(argv, "run")
		if argv[0] == "--data-dir" && argv[1] == "run" {
			i = 2
		}
		line := append(append(append([]string{}, argv[:i+1]...), "--dry-run"), argv[i+1:]...)

		var leanOut, leanErr bytes.Buffer
		lean := &runcli.App{Stdin: strings.NewReader(""), Stdout: &leanOut, Stderr: &leanErr}
		lerr := lean.Execute(line)

		var cobraOut, cobraErr bytes.Buffer
		full := &runcli.App{Stdin: strings.NewReader(""), Stdout: &cobraOut, Stderr: &cobraErr}
		root := newBaseRoot(full)
		root.SetArgs(line)
		cerr := root.Execute()

		if (lerr == nil) != (cerr == nil) || lerr != nil && lerr.Error() != cerr.Error() {
			t.Errorf("%q: lean %v, cobra %v", line, lerr, cerr)
			continue
		}
		if noID(leanOut.String()) != noID(cobraOut.String()) || leanErr.String() != cobraErr.String() {
			t.Errorf("%q:\nlean:  %s%s\ncobra: %s%s", line, leanOut.String(), leanErr.String(), cobraOut.String(), cobraErr.String())
		}
		if lean.ConfigPath != full.ConfigPath || lean.DataDir != full.DataDir || lean.LogLevel != full.LogLevel || lean.Quiet != full.Quiet {
			t.Errorf("%q: globals lean %q %q %q %v, cobra %q %q %q %v", line,
				lean.ConfigPath, lean.DataDir, lean.LogLevel, lean.Quiet, full.ConfigPath, full.DataDir, full.LogLevel, full.Quiet)
		}
		if leanOut.Len() == 0 && lerr == nil {
			t.Errorf("%q: no spec printed", line)
		}
	}
	handedOn := [][]string{
		{"run", "--help"},
		{"run", "-h"},
		{"-h"},
		{"--help", "run"},
		{"run", "--bogus"},
		{"--bogus", "run", "true"},
		{"--image", "alpine", "run", "true"}, // cobra takes it; the lean parser leaves it to cobra
		{"-qc", "x.toml", "run", "true"},
		{"-x", "run", "true"},
		{"-", "run", "true"},
		{"version"},
		{"--data-dir"},
		{"run", "--memory"},
		{"run", "--cpus", "lots"},
		{"--", "run", "true"},
	}
	for _, argv := range handedOn {
		a := &runcli.App{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard}
		if err := a.Execute(argv); !errors.Is(err, runcli.ErrNeedsFull) {
			t.Errorf("%q: %v, want ErrNeedsFull", argv, err)
		}
	}
}

// TestLeanRunHelp: without agentkernel-full, the agentkernel binary
// prints run's help itself, exactly as cobra does.
func TestLeanRunHelp(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	var lean, cobra bytes.Buffer
	a := &runcli.App{Stdin: strings.NewReader(""), Stdout: &cobra, Stderr: io.Discard}
	a.PrintRunHelp(&lean)
	root := newBaseRoot(a)
	root.SetArgs([]string{"run", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if lean.String() != cobra.String() || !strings.Contains(lean.String(), "--no-daemon") {
		t.Fatalf("lean help:\n%s\ncobra help:\n%s", lean.String(), cobra.String())
	}
	if err := (&runcli.App{Stdout: io.Discard, Stderr: io.Discard}).Execute([]string{"run", "-h"}); !errors.Is(err, runcli.ErrRunHelp) {
		t.Fatalf("run -h: %v", err)
	}
}

// noID drops the spec's random "id" line.
func noID(spec string) string {
	var keep []string
	for _, l := range strings.Split(spec, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), `"id": `) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

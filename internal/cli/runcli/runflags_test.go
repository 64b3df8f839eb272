package runcli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// runLine parses argv as a run's command line and runs it with
// RunCommand, with a RunPersistent that records what it was given
// (nil: none, as in the agentkernel binary); stdout is what a dry run
// printed.
func runLine(t *testing.T, persistent bool, argv ...string) (o *RunOptions, got *PersistentRun, stdout string, err error) {
	t.Helper()
	var out bytes.Buffer
	a := &App{Stdin: strings.NewReader(""), Stdout: &out, Stderr: io.Discard}
	if persistent {
		a.RunPersistent = func(_ context.Context, r PersistentRun) error {
			got = &r
			return nil
		}
	}
	o, set, args, err := a.ParseRun(argv)
	if err != nil {
		return nil, nil, "", err
	}
	if err := a.SetupLogging(); err != nil {
		t.Fatal(err)
	}
	err = a.RunCommand(context.Background(), o, set, args)
	return o, got, out.String(), err
}

// TestRunUpstreamFlags: upstream's -F/--fast, --compatibility-mode,
// --ttl, --branch and --template, and docker's --rm, --name, -d and -m,
// on run: what each becomes, and the combinations refused with a line
// that says why (exit status 125), before anything runs.
func TestRunUpstreamFlags(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir+"/config")

	// Dry runs: the spec shows what the flags became.
	_, _, out, err := runLine(t, false, "run", "--dry-run", "-i", "alpine:3.20", "--compatibility-mode", "codex", "-m", "96m", "--rm", "-F", "--", "true")
	if err != nil || !strings.Contains(out, `"mode": "codex"`) || !strings.Contains(out, `"memory_mb": 96`) {
		t.Errorf("--compatibility-mode codex -m 96m --rm -F: %v\n%s", err, out)
	}
	_, _, out, err = runLine(t, false, "run", "--dry-run", "-i", "alpine:3.20", "--memory=80m", "--mode", "claude", "--compatibility-mode=claude", "true")
	if err != nil || !strings.Contains(out, `"mode": "claude"`) || !strings.Contains(out, `"memory_mb": 80`) {
		t.Errorf("--mode and --compatibility-mode agreeing: %v\n%s", err, out)
	}

	// --fast=false is --no-daemon; --fast (default true) leaves it off.
	for argv, want := range map[string]bool{
		"run --dry-run --fast=false -i alpine true": true,
		"run --dry-run -F=false -i alpine true":     true,
		"run --dry-run --fast -i alpine true":       false,
		"run --dry-run -i alpine true":              false,
		"run --dry-run --fast=false -k -i alpine x": true,
	} {
		o, _, _, err := runLine(t, false, strings.Fields(argv)...)
		if err != nil || o.noDaemon != want {
			t.Errorf("%s: %v, no daemon %v, want %v", argv, err, o != nil && o.noDaemon, want)
		}
	}

	// The persistent runs: handed to RunPersistent, or ErrNeedsFull
	// where there is none (the agentkernel binary hands them over).
	for _, c := range []struct {
		argv string
		want PersistentRun
	}{
		{"run --name dev -m 1g -- make test", PersistentRun{Name: "dev", Args: []string{"make", "test"}}},
		{"run --branch --ttl 2h npm test", PersistentRun{Branch: true, TTL: 2 * time.Hour, Args: []string{"npm", "test"}}},
		{"run -d --name box --ttl 90", PersistentRun{Name: "box", Detach: true, TTL: 90 * time.Second}},
		{"run -d", PersistentRun{Detach: true}},
		{"run --fast=false --name dev true", PersistentRun{Name: "dev", Args: []string{"true"}}},
		// --keep: a new persistent sandbox, 1h unless --ttl says.
		{"run --keep -- make", PersistentRun{Keep: true, TTL: time.Hour, Args: []string{"make"}}},
		{"run -k --ttl 1d2h true", PersistentRun{Keep: true, TTL: 26 * time.Hour, Args: []string{"true"}}},
		{"run --keep --name dev --ttl 30 true", PersistentRun{Name: "dev", Keep: true, TTL: 30 * time.Second, Args: []string{"true"}}},
		{"run --fast=false --keep true", PersistentRun{Keep: true, TTL: time.Hour, Args: []string{"true"}}},
	} {
		argv := strings.Fields(c.argv)
		if _, _, _, err := runLine(t, false, argv...); !errors.Is(err, ErrNeedsFull) {
			t.Errorf("%s without RunPersistent: %v, want ErrNeedsFull", c.argv, err)
		}
		_, got, _, err := runLine(t, true, argv...)
		if err != nil || got == nil {
			t.Errorf("%s: %v, RunPersistent not called", c.argv, err)
			continue
		}
		if got.Name != c.want.Name || got.Branch != c.want.Branch || got.Detach != c.want.Detach || got.Keep != c.want.Keep || got.TTL != c.want.TTL ||
			strings.Join(got.Args, " ") != strings.Join(c.want.Args, " ") || got.Overrides == nil {
			t.Errorf("%s: %+v, want %+v", c.argv, *got, c.want)
		}
		if c.argv == "run --name dev -m 1g -- make test" && got.Overrides.Memory != "1g" {
			t.Errorf("%s: overrides %+v", c.argv, *got.Overrides)
		}
	}

	// Refused, each with a line that names the flags.
	for argv, want := range map[string]string{
		"run --template pyhton -- python3 x":             "template \"pyhton\" not found (did you mean python?)",
		"run --template= -- python3 x":                   "--template needs a template name or file",
		"run --template github:o/r/p -- python3 x":       "github templates need network access to raw.githubusercontent.com",
		"run --fast --keep true":                         "cannot use --fast with --keep (pooled sandboxes are ephemeral)",
		"run -F -k true":                                 "cannot use --fast with --keep",
		"run --fast --name dev true":                     "cannot use --fast with --name",
		"run --fast --no-daemon true":                    "--fast and --no-daemon contradict",
		"run --ttl 1h true":                              "--ttl sets when a sandbox kept with --keep, --name, -d or --branch expires",
		"run --keep=false --ttl 1h true":                 "--ttl sets when",
		"run --name dev --ttl 0 true":                    "longer than zero",
		"run --keep --ttl 0s true":                       "longer than zero",
		"run --keep":                                     "--keep needs a command",
		"run --keep --branch true":                       "--keep and --branch",
		"run --keep -d":                                  "--keep and -d",
		"run --keep --timeout 5s true":                   "--timeout and --keep",
		"run --rm --keep true":                           "--rm and --keep contradict",
		"run --rm --name dev true":                       "--rm and --name contradict",
		"run --name dev --branch true":                   "give either --name or --branch",
		"run --name dev":                                 "--name needs a command",
		"run --branch":                                   "--branch needs a command",
		"run -d -- sleep 100":                            "run -d with a command",
		"run -d --branch":                                "-d and --branch",
		"run --name dev --timeout 5s true":               "--timeout and --name: a kept sandbox has no run timeout",
		"run -d -t --name x":                             "-d and -t/--interactive contradict",
		"run --name ../x true":                           "sandbox name",
		"run --mode claude --compatibility-mode codex x": `--mode "claude" and --compatibility-mode "codex" disagree`,
	} {
		for _, persistent := range []bool{false, true} {
			_, got, _, err := runLine(t, persistent, strings.Fields(argv)...)
			var ee *ExitError
			if !errors.As(err, &ee) || ee.Code != ExitAgentkernel || !strings.Contains(ee.Error(), want) || ee.Hint == "" {
				t.Errorf("%s: %v, want exit 125 with %q", argv, err, want)
			}
			if got != nil {
				t.Errorf("%s: RunPersistent called with %+v", argv, *got)
			}
		}
	}
	// --fast=false with --keep is upstream's own advice.
	if _, _, _, err := runLine(t, false, "run", "--dry-run", "--fast=false", "--keep", "-i", "alpine", "true"); err != nil {
		t.Errorf("--fast=false --keep: %v", err)
	}
	// --keep is no flag of the spec any more: nothing keeps a run's layer.
	if _, _, out, err := runLine(t, false, "run", "--dry-run", "--keep", "-i", "alpine", "true"); err != nil || strings.Contains(out, `"keep"`) {
		t.Errorf("--keep in the spec: %v\n%s", err, out)
	}
}

// TestRunHelpHabits: run's help says what upstream's flags and docker's
// habits do here, and how -p, -i and -m differ from docker's.
func TestRunHelpHabits(t *testing.T) {
	var out bytes.Buffer
	(&App{}).PrintRunHelp(&out)
	for _, want := range []string{"-F, --fast", "--compatibility-mode", "--rm", "--name string", "-d, --detach", "-m, --memory", "--ttl", "--branch", "--template",
		"Unlike docker's, -p is the security profile", "--fast=false never uses the\ndaemon", "agentkernel run -d --name box"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("run --help misses %q:\n%s", want, out.String())
		}
	}
}

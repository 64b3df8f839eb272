package runcli

import (
	"errors"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestParseRun: the one parser of a run's command line, as both binaries
// use it: global flags before and after "run", run's flags before it
// too, grouped and attached short flags, "--", the command's own flags
// left to it.
func TestParseRun(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	t.Setenv("XDG_DATA_HOME", "")
	type globals struct {
		config, dataDir, logLevel string
		quiet                     bool
	}
	def := globals{"", "/home/u/.local/share/agentkernel", "warn", false}
	for _, c := range []struct {
		argv    []string
		globals globals
		set     []string
		args    []string
		check   func(*RunOptions) bool
	}{
		{argv: []string{"run", "true"}, globals: def, args: []string{"true"}},
		{argv: []string{"run"}, globals: def},
		{argv: []string{"--data-dir", "/d", "run", "--image", "alpine:3.20", "--", "sh", "-c", "exit 3"},
			globals: globals{"", "/d", "warn", false}, set: []string{"data-dir", "image"}, args: []string{"sh", "-c", "exit 3"},
			check: func(o *RunOptions) bool { return o.overrides.Image == "alpine:3.20" }},
		{argv: []string{"-q", "run", "-e", "A=1", "-e", "B=2", "-v", "/x:/y:ro", "python3", "-c", "print(1)"},
			globals: globals{"", def.dataDir, "warn", true}, set: []string{"quiet", "env", "volume"}, args: []string{"python3", "-c", "print(1)"},
			check: func(o *RunOptions) bool {
				return slices.Equal(o.overrides.Env, []string{"A=1", "B=2"}) && slices.Equal(o.overrides.Volumes, []string{"/x:/y:ro"})
			}},
		{argv: []string{"--config=o.toml", "run", "--memory", "64m", "--cpus", "0.5", "--timeout", "30s", "-t", "--interactive", "sh"},
			globals: globals{"o.toml", def.dataDir, "warn", false}, set: []string{"config", "memory", "cpus", "timeout", "tty", "interactive"}, args: []string{"sh"},
			check: func(o *RunOptions) bool {
				v := o.overrides
				return v.Memory == "64m" && v.CPUs == 0.5 && v.Timeout == 30*time.Second && v.TTY && v.Interactive
			}},
		{argv: []string{"-cother.toml", "run", "x"}, globals: globals{"other.toml", def.dataDir, "warn", false}, set: []string{"config"}, args: []string{"x"}},
		{argv: []string{"-c=other.toml", "--quiet=false", "-q", "run", "x"}, globals: globals{"other.toml", def.dataDir, "warn", true}, set: []string{"config", "quiet"}, args: []string{"x"}},
		// Grouped switches and a value, before "run" too.
		{argv: []string{"-qc", "x.toml", "run", "-tkialpine", "sh"}, globals: globals{"x.toml", def.dataDir, "warn", true},
			set: []string{"quiet", "config", "tty", "keep", "image"}, args: []string{"sh"},
			check: func(o *RunOptions) bool { return o.overrides.TTY && o.overrides.Keep && o.overrides.Image == "alpine" }},
		// Run's flags before "run", as cobra took them.
		{argv: []string{"--image", "alpine", "--no-daemon", "run", "true"}, globals: def, set: []string{"image", "no-daemon"}, args: []string{"true"},
			check: func(o *RunOptions) bool { return o.noDaemon && o.overrides.Image == "alpine" }},
		{argv: []string{"run", "--no-network", "--read-only", "-u", "1000:1000", "-w", "/w", "--hostname", "h", "--userns", "host",
			"-B", "native", "--pull", "never", "-p", "restrictive", "--mode", "codex", "--env-file", "e.txt", "--pids", "10", "--dry-run", "--", "x", "-y"},
			globals: def, set: []string{"no-network", "read-only", "user", "workdir", "hostname", "userns", "backend", "pull", "profile", "mode", "env-file", "pids", "dry-run"},
			args: []string{"x", "-y"},
			check: func(o *RunOptions) bool {
				v := o.overrides
				return v.NoNetwork && v.ReadOnly && v.User == "1000:1000" && v.Workdir == "/w" && v.Hostname == "h" && v.HostUserNS &&
					o.backend == "native" && v.Pull == "never" && v.Profile == "restrictive" && v.Mode == "codex" &&
					slices.Equal(v.EnvFiles, []string{"e.txt"}) && v.PIDs == 10 && o.dryRun
			}},
		// The command's flags are its own, global ones included.
		{argv: []string{"--log-level", "debug", "run", "--data-dir", "/e", "-i", "alpine", "cat", "--image", "x", "-q"},
			globals: globals{"", "/e", "debug", false}, set: []string{"log-level", "data-dir", "image"}, args: []string{"cat", "--image", "x", "-q"}},
		{argv: []string{"--data-dir", "run", "run", "true"}, globals: globals{"", "run", "warn", false}, set: []string{"data-dir"}, args: []string{"true"}},
		{argv: []string{"run", "--timeout=5", "--", "--"}, globals: def, set: []string{"timeout"}, args: []string{"--"},
			check: func(o *RunOptions) bool { return o.overrides.Timeout == 5*time.Second }},
		{argv: []string{"run", "--timeout", "0", "x"}, globals: def, set: []string{"timeout"}, args: []string{"x"},
			check: func(o *RunOptions) bool { return o.overrides.Timeout == 0 }},
		// Given on both sides of "run": given twice.
		{argv: []string{"-e", "A=1", "run", "-e", "B=2", "x"}, globals: def, set: []string{"env"}, args: []string{"x"},
			check: func(o *RunOptions) bool { return slices.Equal(o.overrides.Env, []string{"A=1", "B=2"}) }},
	} {
		a := &App{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard}
		o, set, args, err := a.ParseRun(c.argv)
		if err != nil {
			t.Errorf("%q: %v", c.argv, err)
			continue
		}
		if g := (globals{a.ConfigPath, a.DataDir, a.LogLevel, a.Quiet}); g != c.globals {
			t.Errorf("%q: globals %+v, want %+v", c.argv, g, c.globals)
		}
		if got := slices.Sorted(maps.Keys(set)); !slices.Equal(got, slices.Sorted(slices.Values(c.set))) {
			t.Errorf("%q: flags given %q, want %q", c.argv, got, slices.Sorted(slices.Values(c.set)))
		}
		if len(args) != 0 || len(c.args) != 0 {
			if !reflect.DeepEqual(args, c.args) {
				t.Errorf("%q: command %q, want %q", c.argv, args, c.args)
			}
		}
		if c.check != nil && !c.check(o) {
			t.Errorf("%q: options %+v", c.argv, o.overrides)
		}
	}
}

// TestParseRunRefuses: what is not a run is ErrNeedsFull (another
// command's line); help is ErrRunHelp; a flag pflag refuses is an
// *ExitError with status 125, pflag's words and the hint to see run's
// help, in both binaries alike.
func TestParseRunRefuses(t *testing.T) {
	for _, argv := range [][]string{{"version"}, {"-h"}, {"--", "run", "true"}, {"images", "run"}, {"--data-dir"}, {"-c", "run"}, {}} {
		if _, _, _, err := (&App{}).ParseRun(argv); !errors.Is(err, ErrNeedsFull) || errors.Is(err, ErrRunHelp) {
			t.Errorf("%q: %v, want ErrNeedsFull", argv, err)
		}
	}
	for _, argv := range [][]string{{"run", "--help"}, {"run", "-h", "true"}, {"--help", "run"}, {"-q", "run", "-th"}} {
		if _, _, _, err := (&App{}).ParseRun(argv); !errors.Is(err, ErrRunHelp) {
			t.Errorf("%q: %v, want ErrRunHelp", argv, err)
		}
	}
	for argv, want := range map[string]string{
		"run --bogus true":         "unknown flag: --bogus",
		"--bogus run true":         "unknown flag: --bogus",
		"-x run true":              "unknown shorthand flag: 'x' in -x",
		"run --memory":             "flag needs an argument: --memory",
		"run --cpus lots true":     `invalid argument "lots" for "--cpus" flag: strconv.ParseFloat: parsing "lots": invalid syntax`,
		"run --userns maybe true":  `invalid argument "maybe" for "--userns" flag: use host or private`,
		"run --timeout soon true":  `invalid argument "soon" for "--timeout" flag: `,
		"--quiet=perhaps run true": `invalid argument "perhaps" for "-q, --quiet" flag: strconv.ParseBool: parsing "perhaps": invalid syntax`,
	} {
		_, _, _, err := (&App{}).ParseRun(strings.Fields(argv))
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != ExitAgentkernel || !strings.HasPrefix(ee.Err.Error(), want) || ee.Hint != "see 'agentkernel run --help'" {
			t.Errorf("%s: %v (%+v), want %q with run's hint", argv, err, ee, want)
		}
	}
}

package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
)

// fullRun runs argv (without the program name) as agentkernel-full's
// main does.
func fullRun(argv ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	a := NewApp(runcli.App{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	root := NewRootCommandFor(a, append([]string{"agentkernel-full"}, argv...))
	root.SetArgs(argv)
	code = runcli.ExitCode(root.Execute(), &errb)
	return out.String(), errb.String(), code
}

// TestFullRunCommandLine: agentkernel-full reads a run's command line with
// runcli's parser, whole: forms cobra's routing would misread (grouped
// switches and run's flags before "run") resolve the same spec as their
// plain spelling, and help and errors are those of the agentkernel binary.
func TestFullRunCommandLine(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	if err := os.WriteFile("other.toml", []byte("[resources]\nmemory_mb = 300\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plain, stderr, code := fullRun("--config", "other.toml", "--quiet", "run", "--dry-run", "--image", "alpine:3.20", "--no-daemon", "--", "sh", "-c", "x")
	if code != 0 || !strings.Contains(plain, `"memory_mb": 300`) || !strings.Contains(plain, `"alpine:3.20"`) {
		t.Fatalf("plain run line: %d\n%s%s", code, plain, stderr)
	}
	for _, argv := range [][]string{
		{"-qc", "other.toml", "run", "--dry-run", "-ialpine:3.20", "--no-daemon", "sh", "-c", "x"},
		{"--no-daemon", "-i", "alpine:3.20", "-qcother.toml", "run", "--dry-run", "--", "sh", "-c", "x"},
		{"run", "--dry-run", "-c", "other.toml", "--image=alpine:3.20", "-q", "--no-daemon", "sh", "-c", "x"},
	} {
		out, stderr, code := fullRun(argv...)
		if code != 0 || noID(out) != noID(plain) {
			t.Errorf("%q: %d\n%s%s\nwant\n%s", argv, code, out, stderr, plain)
		}
	}

	// Help: run's, the same for every way of asking, from both binaries.
	var want bytes.Buffer
	(&runcli.App{}).PrintRunHelp(&want)
	if !strings.Contains(want.String(), "Usage:\n  agentkernel run [flags] [--] COMMAND [ARG...]") ||
		!strings.Contains(want.String(), "--no-daemon") || !strings.Contains(want.String(), "Global Flags:\n  -c, --config") {
		t.Fatalf("run's help:\n%s", want.String())
	}
	for _, argv := range [][]string{{"run", "--help"}, {"run", "-h"}, {"-q", "--help", "run", "x"}, {"help", "run"}, {"run", "-i", "x", "-h", "--bogus"}} {
		out, stderr, code := fullRun(argv...)
		if code != 0 || out != want.String() || stderr != "" {
			t.Errorf("%q: %d %q\n%s", argv, code, stderr, out)
		}
	}
	// The root's help still lists run.
	if out, _, code := fullRun("--help"); code != 0 || !strings.Contains(out, "  run ") {
		t.Errorf("--help: %d\n%s", code, out)
	}

	// Errors: pflag's words, status 125, the hint to see run's help.
	for argv, msg := range map[string]string{
		"run --bogus true":          "agentkernel: unknown flag: --bogus\n",
		"--bogus run true":          "agentkernel: unknown flag: --bogus\n",
		"-qx run true":              "agentkernel: unknown shorthand flag: 'x' in -x\n",
		"run --memory":              "agentkernel: flag needs an argument: --memory\n",
		"run --cpus lots sh":        "agentkernel: invalid argument \"lots\" for \"--cpus\" flag: strconv.ParseFloat: parsing \"lots\": invalid syntax\n",
		"--log-level loud run true": "agentkernel: --log-level \"loud\": use debug, info, warn or error\n",
	} {
		out, stderr, code := fullRun(strings.Fields(argv)...)
		hint := "hint: see 'agentkernel run --help'\n"
		if strings.HasPrefix(argv, "--log-level") {
			hint = "hint: see 'agentkernel --help'\n"
		}
		if code != runcli.ExitAgentkernel || out != "" || stderr != msg+hint {
			t.Errorf("%s: %d %q, want %q", argv, code, stderr, msg+hint)
		}
	}
}

// TestRunCompletion: run's flags complete until its command begins;
// after that, the command's own arguments are files.
func TestRunCompletion(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	out, _, code := fullRun("__complete", "-q", "run", "--no")
	if code != 0 || !strings.Contains(out, "--no-daemon\t") || !strings.Contains(out, "--no-network\t") {
		t.Errorf("run --no: %d\n%s", code, out)
	}
	out, _, code = fullRun("__complete", "run", "-i", "alpine", "sh", "--i")
	if code != 0 || strings.Contains(out, "--image") || strings.Contains(out, "--interactive") {
		t.Errorf("the command's own flag completed as run's: %d\n%s", code, out)
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

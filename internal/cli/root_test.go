package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
)

// TestRootCommandFor: a run gets a command without the tree, which hands
// the command line to runcli's parser; every other command line gets the
// whole tree.
func TestRootCommandFor(t *testing.T) {
	names := func(args ...string) []string {
		var out bytes.Buffer
		a := NewApp(runcli.App{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out})
		var n []string
		for _, c := range NewRootCommandFor(a, append([]string{"agentkernel"}, args...)).Commands() {
			n = append(n, c.Name())
		}
		return n
	}
	if got := names("--data-dir", "/d", "-q", "run", "--", "true"); len(got) != 0 {
		t.Errorf("a run's tree has %v, want none", got)
	}
	for _, args := range [][]string{{"version"}, {"--help"}, {"help", "run"}, {"sandbox", "run"}, {}} {
		if got := names(args...); len(got) < 10 {
			t.Errorf("%v: tree has %v, want every command", args, got)
		}
	}
	// A run's command still parses global flags and prints run's help.
	var out bytes.Buffer
	a := NewApp(runcli.App{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out})
	root := NewRootCommandFor(a, []string{"agentkernel", "run", "--help"})
	root.SetArgs([]string{"--data-dir", t.TempDir(), "run", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "--image") || !strings.Contains(s, "--data-dir") {
		t.Errorf("run --help misses its own or the global flags:\n%s", s)
	}
}

package runcli

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/agentkernel/agentkernel/internal/backend/native/prestart"
)

// TestRunFlagsKnownToPrestart: package prestart reads a run's command
// line before cobra exists (to decide whether to make the sandbox thread
// during start-up), so it must know which of run's flags and the global
// ones take a value and what each one-letter flag stands for. A flag
// added to run without telling prestart fails here.
func TestRunFlagsKnownToPrestart(t *testing.T) {
	a := &App{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard}
	root := NewRoot(a)
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

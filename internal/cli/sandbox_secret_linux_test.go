package cli

import (
	"errors"
	"strings"
	"testing"
)

// TestSandboxCreateSecretRefused: 'sandbox create -S' is refused with a
// clear error (exit status 125), not pflag's "unknown flag", and nothing
// is created.
func TestSandboxCreateSecretRefused(t *testing.T) {
	dir := t.TempDir()
	for _, argv := range [][]string{
		{"sandbox", "create", "box", "-S", "GH:api.github.test"},
		{"sandbox", "create", "--secret", "GH=hunter2-value:api.github.test"},
	} {
		_, stderr, err := runCLI(t, dir, append([]string{"--data-dir", dir}, argv...)...)
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != ExitAgentkernel {
			t.Fatalf("%v: %v, want exit status 125", argv, err)
		}
		msg := ee.Error() + " " + ee.Hint + " " + stderr
		if !strings.Contains(msg, "'agentkernel run' only") || strings.Contains(msg, "unknown") || strings.Contains(msg, "hunter2") {
			t.Errorf("%v: %q", argv, msg)
		}
	}
	out, _, err := runCLI(t, dir, "--data-dir", dir, "sandbox", "list")
	if err != nil || strings.Contains(out, "box") {
		t.Errorf("sandbox list after the refusal: %q %v", out, err)
	}
}

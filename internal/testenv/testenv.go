// Package testenv is test support: what a test does when something it
// needs (root, a tool, a kernel feature) is missing on the machine.
//
// By default such a test skips, so that `go test ./...` as an ordinary
// user on a workstation reports what it could not check. The project's
// test suite (scripts/test.sh, which CI runs as root) sets
// AGENTKERNEL_TEST_STRICT=1: there a missing prerequisite fails the test
// loudly, so that a machine that lost a tool or its root can never turn
// a security test into a silent "ok".
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// StrictEnv names the variable that turns missing prerequisites into
// failures.
const StrictEnv = "AGENTKERNEL_TEST_STRICT"

// Strict reports whether missing prerequisites fail tests.
func Strict() bool { return os.Getenv(StrictEnv) == "1" }

// Missing ends t because a prerequisite is missing: a failure in strict
// mode, a skip otherwise. The message says what is missing and how to
// get it.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Strict() {
		t.Fatalf("cannot run: %s (%s=1: a missing prerequisite is a failure)", msg, StrictEnv)
	}
	t.Skip(msg)
}

// RequireRoot ends t with Missing unless the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "needs root (run the suite as root, as CI does)")
	}
}

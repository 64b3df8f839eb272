package native

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"/bin/true"}, 0},
		{[]string{"false"}, 1},
		{[]string{"sh", "-c", "exit 42"}, 42},
		{[]string{"sh", "-c", "kill -9 $$"}, 137},
	} {
		o := mustRun(t, newSpec(tc.args...), tc.code)
		if tc.code == 137 && o.res.Signal != 9 {
			t.Errorf("%q: signal %d, want 9", tc.args, o.res.Signal)
		}
	}
}

func TestExecErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want error
	}{
		{[]string{"no-such-command"}, sandbox.ErrNotFound},
		{[]string{"/no/such/path"}, sandbox.ErrNotFound},
		{[]string{"/etc/noexec"}, sandbox.ErrCannotInvoke},
		{[]string{"/bin/noexec"}, sandbox.ErrCannotInvoke},
		{[]string{"/etc"}, sandbox.ErrCannotInvoke},
	} {
		o := runSpec(t, newSpec(tc.args...), nil)
		if !errors.Is(o.err, tc.want) {
			t.Errorf("%q: err %v, want %v", tc.args, o.err, tc.want)
		}
	}
}

func TestOutputAndStdin(t *testing.T) {
	o := runSpec(t, newSpec("sh", "-c", "tr a-z A-Z; echo err >&2"), strings.NewReader("hello sandbox\n"))
	if o.err != nil || o.res.ExitCode != 0 {
		t.Fatalf("%v %v", o.err, o.res)
	}
	if o.stdout != "HELLO SANDBOX\n" || o.stderr != "err\n" {
		t.Fatalf("stdout %q stderr %q", o.stdout, o.stderr)
	}
}

// TestLargeEnvironment passes ~1 MiB of environment, far more than one
// config datagram can hold: it must reach the command intact.
func TestLargeEnvironment(t *testing.T) {
	spec := newSpec("sh", "-c", `echo ${#V0} ${#V9}`)
	for i := 0; i < 10; i++ {
		spec.Env = append(spec.Env, "V"+string(rune('0'+i))+"="+strings.Repeat("x", 100_000))
	}
	o := mustRun(t, spec, 0)
	if o.stdout != "100000 100000\n" {
		t.Fatalf("stdout %q", o.stdout)
	}
}

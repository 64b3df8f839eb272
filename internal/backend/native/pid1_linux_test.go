package native

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// pid1Status is a command that prints, for every thread of the
// sandbox's PID 1, its capability sets, no_new_privs and seccomp mode.
const pid1Status = `for f in /proc/1/task/*/status; do grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' $f; done`

// checkPID1 fails t unless every line of out (pid1Status's output) says
// PID 1 holds nothing: no capability in any set, no_new_privs, a
// seccomp filter.
func checkPID1(t *testing.T, how, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 7 {
		t.Fatalf("%s: PID 1's status not read: %q", how, out)
	}
	for _, l := range lines {
		k, v, _ := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		want := "0000000000000000"
		switch k {
		case "NoNewPrivs":
			want = "1"
		case "Seccomp":
			want = "2"
		}
		if v != want {
			t.Errorf("%s: PID 1 %s is %s, want %s", how, k, v, want)
		}
	}
}

// TestPID1HoldsNothing: once the sandbox is built, its PID 1 has no
// capability in any set, no_new_privs and a seccomp filter, whichever
// way the sandbox was built (on a thread with the stub as PID 1, or by
// a re-executed init that stays on; with the stub or the Go exec
// stage; prepared as a warm pool does).
func TestPID1HoldsNothing(t *testing.T) {
	requireRoot(t)
	run := func(t *testing.T, b *Backend) {
		o := func() outcome {
			var out, errb bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := b.Run(ctx, newSpec("sh", "-c", pid1Status), sandbox.Stdio{Stdout: &out, Stderr: &errb})
			return outcome{res: res, err: err, stdout: out.String(), stderr: errb.String()}
		}()
		if o.err != nil || o.res.ExitCode != 0 {
			t.Fatalf("%v %+v %q", o.err, o.res, o.stderr)
		}
		checkPID1(t, t.Name(), o.stdout)
	}
	t.Run("thread", func(t *testing.T) { run(t, New(Options{DataDir: t.TempDir()})) })
	t.Run("reexec", func(t *testing.T) {
		t.Setenv("AGENTKERNEL_REEXEC_INIT", "1")
		run(t, New(Options{DataDir: t.TempDir()}))
	})
	t.Run("goexec", func(t *testing.T) {
		b := New(Options{DataDir: t.TempDir()})
		b.goExecStage = true
		run(t, b)
	})
	for _, how := range []string{"prepared-thread", "prepared-reexec"} {
		t.Run(how, func(t *testing.T) {
			if how == "prepared-reexec" {
				t.Setenv("AGENTKERNEL_REEXEC_INIT", "1")
			}
			b := New(Options{DataDir: t.TempDir()})
			defer b.Drain()
			p := prepare(t, b, newSpec())
			defer p.Close()
			var out, errb bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := p.Run(ctx, []string{"sh", "-c", pid1Status}, sandbox.Stdio{Stdout: &out, Stderr: &errb}, nil)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("%v %+v %q", err, res, errb.String())
			}
			checkPID1(t, how, out.String())
		})
	}
}

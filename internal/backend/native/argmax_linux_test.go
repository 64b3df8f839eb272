package native

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestArgMaxRefusedAtOnce: an argv and environment that execve would
// refuse (96 MiB here, as the attack battery's huge_env_argv sends) is
// refused before any stage runs, as "cannot invoke"; one the kernel
// takes (1 MiB) still runs.
func TestArgMaxRefusedAtOnce(t *testing.T) {
	arg := strings.Repeat("A", maxArgStrlen-1)
	spec := newSpec("true")
	for i := 0; i < 512; i++ {
		spec.Args = append(spec.Args, arg)
	}
	for i := 0; i < 256; i++ {
		spec.Env = append(spec.Env, "BIG="+arg[4:])
	}
	o := runSpec(t, spec, nil)
	// "over the kernel's": refused by the check before the stages, not
	// by an execve at their end.
	if !errors.Is(o.err, sandbox.ErrCannotInvoke) || !strings.Contains(o.err.Error(), "argument list too long") || !strings.Contains(o.err.Error(), "over the kernel's") {
		t.Errorf("96 MiB of argv: %v %+v", o.err, o.res)
	}
	spec = newSpec("sh", "-c", `echo ${#1}`, "sh", strings.Repeat("B", 1<<17-1))
	if o := runSpec(t, spec, nil); o.err != nil || o.stdout != "131071\n" {
		t.Errorf("a 128 KiB argument: %v %q %q", o.err, o.stdout, o.stderr)
	}
	spec = newSpec("sh", "-c", "echo $(( ${#X} + 1 ))")
	spec.Env = []string{"X=" + strings.Repeat("C", maxArgStrlen)}
	if o := runSpec(t, spec, nil); !errors.Is(o.err, sandbox.ErrCannotInvoke) {
		t.Errorf("a variable over MAX_ARG_STRLEN: %v %q", o.err, o.stdout)
	}
}

package mcp

import (
	"context"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// otherRecorder is a second backend, by another name, that records too.
type otherRecorder struct{ recorder }

func (r *otherRecorder) Name() string { return "other" }

func (r *otherRecorder) Run(ctx context.Context, spec *sandbox.Spec, stdio sandbox.Stdio) (sandbox.Result, error) {
	return r.recorder.Run(ctx, spec, stdio)
}

// TestRunBackendArgument: sandbox_run's backend argument runs the command
// on that backend; none runs it on the default one; an unknown one is an
// isError result naming the backends there are, and runs nothing;
// sandbox_create refuses an unknown one the same way.
func TestRunBackendArgument(t *testing.T) {
	f := newConfineFixture(t)
	def, other := &recorder{}, &otherRecorder{}
	opts := f.options()
	opts.Manager = sandbox.NewManager(sandbox.ManagerOptions{Images: hostImages{}, Backends: []sandbox.Backend{def, other}, Default: "recorder"})
	cs := sdkSession(t, NewServer(opts))
	if text, isErr := callText(t, cs, "sandbox_run", map[string]any{"command": []string{"true"}, "image": "host", "backend": "other"}); isErr || other.last() == nil || def.last() != nil {
		t.Fatalf("backend other: %q (isError %v), other ran %v, default ran %v", text, isErr, other.last() != nil, def.last() != nil)
	}
	if text, isErr := callText(t, cs, "sandbox_run", map[string]any{"command": []string{"true"}, "image": "host"}); isErr || def.last() == nil {
		t.Fatalf("no backend: %q (isError %v)", text, isErr)
	}
	n := len(def.specs) + len(other.specs)
	text, isErr := callText(t, cs, "sandbox_run", map[string]any{"command": []string{"true"}, "image": "host", "backend": "nope"})
	if !isErr || !strings.Contains(text, `unknown backend "nope"; available: other, recorder`) {
		t.Errorf("backend nope: %q (isError %v)", text, isErr)
	}
	text, isErr = callText(t, cs, "sandbox_create", map[string]any{"name": "box", "image": "host", "backend": "nope"})
	if !isErr || !strings.Contains(text, `unknown backend "nope"`) {
		t.Errorf("sandbox_create, backend nope: %q (isError %v)", text, isErr)
	}
	if got := len(def.specs) + len(other.specs); got != n {
		t.Errorf("a refused backend ran %d commands", got-n)
	}
}

// TestDefaultBackendOption: a server whose Options.Backend names another
// backend (serve's [sandbox] backend) runs sandbox_run calls that name
// none there; a call naming the Manager's own still runs there.
func TestDefaultBackendOption(t *testing.T) {
	f := newConfineFixture(t)
	def, other := &recorder{}, &otherRecorder{}
	opts := f.options()
	opts.Manager = sandbox.NewManager(sandbox.ManagerOptions{Images: hostImages{}, Backends: []sandbox.Backend{def, other}, Default: "recorder"})
	opts.Backend = "other"
	cs := sdkSession(t, NewServer(opts))
	if text, isErr := callText(t, cs, "sandbox_run", map[string]any{"command": []string{"true"}, "image": "host"}); isErr || other.last() == nil || def.last() != nil {
		t.Fatalf("no backend: %q (isError %v), other ran %v, recorder ran %v", text, isErr, other.last() != nil, def.last() != nil)
	}
	if text, isErr := callText(t, cs, "sandbox_run", map[string]any{"command": []string{"true"}, "image": "host", "backend": "recorder"}); isErr || def.last() == nil {
		t.Fatalf("backend recorder: %q (isError %v)", text, isErr)
	}
}

package api

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// countingStandIn is standIn counting its preparations.
type countingStandIn struct {
	standIn
	prepared atomic.Int64
}

func (b *countingStandIn) Prepare(ctx context.Context, spec *sandbox.Spec) (sandbox.Prepared, error) {
	b.prepared.Add(1)
	return b.standIn.Prepare(ctx, spec)
}

// TestRefusedCommandKeepsWarmSandbox: a command that [security.commands]
// refuses is refused before a warm sandbox is taken, on the API's fast
// runs and on the daemon's RunLocal: the pool keeps its ready sandbox
// and prepares none to replace it. An allowed command does use one up
// (the control: the counts do move).
func TestRefusedCommandKeepsWarmSandbox(t *testing.T) {
	b := &countingStandIn{}
	m := sandbox.NewManager(sandbox.ManagerOptions{Backends: []sandbox.Backend{b}, Default: "standin"})
	rules := &sandbox.CommandRules{Block: []string{"curl"}, BlockFrom: "agentkernel.toml:3"}
	spec := func(args ...string) *sandbox.Spec {
		return &sandbox.Spec{Args: args, Rootfs: image.Rootfs{Host: true}, Commands: rules}
	}
	s := New(Options{
		Manager:        m,
		InsecureNoAuth: true,
		Pool:           PoolOptions{MinWarm: 1, MaxWarm: 1},
		Resolve: func(_ context.Context, rs RunSpec) (*sandbox.Spec, error) {
			return spec(rs.Args...), nil
		},
	})
	defer s.pools.close()
	if err := s.Prewarm(spec("true"), 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the warm sandbox", func() bool { return readyIn(s.pools) == 1 })
	settled := func(what string) {
		t.Helper()
		before := b.prepared.Load()
		// A taken sandbox is replaced at once or after refillDelay.
		time.Sleep(3 * refillDelay)
		if n := readyIn(s.pools); n != 1 {
			t.Errorf("%s: %d warm sandboxes, want 1", what, n)
		}
		if n := b.prepared.Load(); n != before {
			t.Errorf("%s: %d sandboxes prepared while settling", what, n-before)
		}
	}
	settled("after prewarming")
	prepared := b.prepared.Load()

	for _, cmd := range []string{`["curl","https://example.com"]`, `["/usr/bin/curl"]`} {
		code, env := do(s, "POST", "/run", `{"command":`+cmd+`}`)
		if code != 409 || !strings.Contains(env["error"].(string), "blocked") {
			t.Errorf("POST /run %s: %d %v, want 409 (blocked)", cmd, code, env)
		}
	}
	_, _, err := s.RunLocal(context.Background(), spec("curl"), sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard}, nil, nil)
	if !errors.Is(err, sandbox.ErrCommandRefused) {
		t.Errorf("RunLocal of a blocked command: %v, want ErrCommandRefused", err)
	}
	settled("after refused commands")
	if n := b.prepared.Load(); n != prepared {
		t.Errorf("refused commands cost %d prepared sandboxes", n-prepared)
	}

	// The control: an allowed command takes the warm sandbox, and the
	// pool prepares its replacement.
	if code, env := do(s, "POST", "/run", `{"command":["true"]}`); code != 200 {
		t.Fatalf("POST /run true: %d %v", code, env)
	}
	waitFor(t, "the taken sandbox's replacement", func() bool { return b.prepared.Load() == prepared+1 && readyIn(s.pools) == 1 })
}

package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestReplyKinds: each kind of failure a run through the daemon reports
// comes back to the client, over the real run socket, as the same kind
// of error (exit 127, 126, a [security.commands] refusal, "run it
// yourself", another build) with the daemon's text unchanged. The kind
// travels as a field of the reply: text that merely looks like a kind
// ("…: command not found") is a plain error.
func TestReplyKinds(t *testing.T) {
	refused := (&sandbox.CommandRules{Block: []string{"wget"}, BlockFrom: "/p/agentkernel.toml:2"}).Check([]string{"wget"})
	fails := map[string]error{
		"not_found":      fmt.Errorf("exec %q: %w", "missing", sandbox.ErrNotFound),
		"refused":        refused,
		"cannot_invoke":  errors.Join(errors.New("exec ./x: permission denied"), sandbox.ErrCannotInvoke),
		"unsupported":    fmt.Errorf("this run cannot use a prepared sandbox: %w", sandbox.ErrUnsupported),
		"plain":          errors.New("no space left on device"),
		"looks_like_127": errors.New("exec x: " + sandbox.ErrNotFound.Error()),
		"looks_refused":  errors.New("wget: " + sandbox.ErrCommandRefused.Error()),
	}
	sock := filepath.Join(t.TempDir(), "run.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	h := Handler{
		Build: BuildID(),
		Run: func(_ context.Context, spec *sandbox.Spec, _ sandbox.Stdio, _ <-chan os.Signal, _ func(string)) (sandbox.Result, string, error) {
			return sandbox.Result{}, "", fails[spec.Args[0]]
		},
		Prewarm: func(spec *sandbox.Spec, _ int) error { return fails[spec.Args[0]] },
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { Serve(ctx, ln, h); close(served) }()
	defer func() { cancel(); <-served }()

	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	all := []error{sandbox.ErrNotFound, sandbox.ErrCannotInvoke, sandbox.ErrCommandRefused, ErrNotServed, ErrStale, ErrNoDaemon}
	for name, want := range map[string][]error{
		"not_found":      {sandbox.ErrNotFound},
		"refused":        {sandbox.ErrCommandRefused, sandbox.ErrCannotInvoke},
		"cannot_invoke":  {sandbox.ErrCannotInvoke},
		"unsupported":    {ErrNotServed},
		"plain":          nil,
		"looks_like_127": nil,
		"looks_refused":  nil,
	} {
		check := func(how string, err error) {
			t.Helper()
			if err == nil {
				t.Errorf("%s %s: no error", how, name)
				return
			}
			if err.Error() != fails[name].Error() {
				t.Errorf("%s %s: %q, want the daemon's text %q", how, name, err, fails[name])
			}
			for _, s := range all {
				is := false
				for _, w := range want {
					is = is || w == s
				}
				if errors.Is(err, s) != is {
					t.Errorf("%s %s: errors.Is(%v) = %v", how, name, s, !is)
				}
			}
		}
		c := NewClient(sock)
		_, err := c.Run(&sandbox.Spec{Args: []string{name}}, devnull, devnull, devnull)
		c.Close()
		check("run", err)
		check("prewarm", Prewarm(sock, &sandbox.Spec{Args: []string{name}}, 1))
	}

	// Another build of the client: nothing runs, the CLI runs it itself.
	c := NewClient(sock)
	c.Build = "1-2"
	_, err = c.Run(&sandbox.Spec{Args: []string{"plain"}}, devnull, devnull, devnull)
	c.Close()
	if !errors.Is(err, ErrStale) || errors.Is(err, ErrNotServed) {
		t.Errorf("another build: %v", err)
	}
	// A kind this client does not know (a newer daemon's) is a plain
	// error with its text.
	if err := (Reply{Error: "x", Kind: "from_the_future"}).err(); err == nil || err.Error() != "x" || errors.Is(err, ErrNotServed) {
		t.Errorf("unknown kind: %v", err)
	}
}

package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv/kubelab"
)

// TestNodeConnPod: a connection reads the record and the pod once, at
// Connect, and its first command goes to that pod without another
// look-up; a command after podFresh looks again. A pod gone in between
// fails the command with ErrNotFound, never runs it elsewhere; a
// sandbox started again is found again.
func TestNodeConnPod(t *testing.T) {
	ctx := context.Background()
	b0 := nodeBackend(t, Options{NoUserNamespace: true})
	var calls atomic.Int64
	b, err := NewForConfig(countingConfig(rest.CopyConfig(b0.cfg), &calls), Options{Namespace: b0.Namespace(), NoUserNamespace: true})
	if err != nil {
		t.Fatal(err)
	}
	s := NewSandboxes(b, t.TempDir())
	spec := &sandbox.Spec{Image: kubelab.TestImage, Profile: "moderate", Network: sandbox.Network{Mode: sandbox.NetworkNone}}
	if err := s.Create(ctx, &sandbox.Info{Name: "cp"}, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Remove(context.Background(), "cp", true) })
	if _, err := s.Start(ctx, "cp"); err != nil {
		t.Fatal(err)
	}
	run := func(c sandbox.Conn, args ...string) (string, error) {
		var out strings.Builder
		res, err := c.Exec(ctx, sandbox.ExecRequest{Args: args}, sandbox.Stdio{Stdout: &out, Stderr: io.Discard}, nil)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d", res.ExitCode)
		}
		return out.String(), err
	}

	// Connect: the record and the pod (the last activity was written
	// by the start, under activityEvery ago: no write). The command:
	// the exec's one request.
	calls.Store(0)
	c, err := s.Connect(ctx, "cp")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run(c, "echo", "one"); err != nil || out != "one\n" {
		t.Fatalf("exec: %q %v", out, err)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("%d API requests for a connection and a command, want 3 (record, pod, exec)", n)
	}

	// Past podFresh the connection looks the pod up again.
	c.(*conn).mu.Lock()
	c.(*conn).seen = time.Now().Add(-2 * podFresh)
	c.(*conn).mu.Unlock()
	calls.Store(0)
	if out, err := run(c, "echo", "two"); err != nil || out != "two\n" {
		t.Fatalf("exec: %q %v", out, err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d API requests for a command after podFresh, want 2 (pod, exec)", n)
	}

	// The pod goes while the connection still trusts it: the command
	// fails, naming the pod gone.
	if _, err := s.Stop(ctx, "cp", "test"); err != nil {
		t.Fatal(err)
	}
	c.(*conn).mu.Lock()
	c.(*conn).seen = time.Now()
	c.(*conn).mu.Unlock()
	if _, err := run(c, "true"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "is gone") {
		t.Errorf("exec into a pod gone since Connect: %v, want ErrNotFound (its pod is gone)", err)
	}
	// Once it no longer trusts it, the look-up finds no pod.
	c.(*conn).mu.Lock()
	c.(*conn).seen = time.Now().Add(-2 * podFresh)
	c.(*conn).mu.Unlock()
	if _, err := run(c, "true"); !errors.Is(err, ErrNotFound) {
		t.Errorf("exec into a stopped sandbox: %v, want ErrNotFound", err)
	}
	if _, err := s.Connect(ctx, "cp"); !errors.Is(err, sandbox.ErrNotRunning) {
		t.Errorf("connect to a stopped sandbox: %v, want ErrNotRunning", err)
	}

	// Started again: the old connection finds the new pod.
	if _, err := s.Start(ctx, "cp"); err != nil {
		t.Fatal(err)
	}
	if out, err := run(c, "echo", "three"); err != nil || out != "three\n" {
		t.Errorf("exec after a restart: %q %v", out, err)
	}

	// A last activity older than activityEvery is written by the next
	// connection.
	old := time.Now().UTC().Add(-2 * activityEvery)
	if _, err := s.Update(ctx, "cp", func(i *sandbox.Info) error { i.LastActivityAt = old; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Connect(ctx, "cp"); err != nil {
		t.Fatal(err)
	}
	if i, err := s.Get(ctx, "cp"); err != nil || !i.LastActivityAt.After(old.Add(activityEvery)) {
		t.Errorf("last activity after a connection: %v %v, want written anew", i.LastActivityAt, err)
	}
}

package kubernetes

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv/kubelab"
)

// TestNodeSandboxesStartShared: two servers starting one sandbox at once
// both find it running, in one pod; the other server stops and removes
// it, records included.
func TestNodeSandboxesStartShared(t *testing.T) {
	ctx := context.Background()
	b1 := nodeBackend(t, Options{NoUserNamespace: true})
	b2, err := NewForConfig(b1.cfg, Options{Namespace: b1.Namespace(), NoUserNamespace: true})
	if err != nil {
		t.Fatal(err)
	}
	s1, s2 := NewSandboxes(b1, t.TempDir()), NewSandboxes(b2, t.TempDir())
	spec := &sandbox.Spec{Image: kubelab.TestImage, Profile: "moderate", Network: sandbox.Network{Mode: sandbox.NetworkNone}}
	if err := s1.Create(ctx, &sandbox.Info{Name: "both"}, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b1.Remove(context.Background(), "both") })
	var wg sync.WaitGroup
	infos := make([]*sandbox.Info, 2)
	errs := make([]error, 2)
	for i, s := range []*Sandboxes{s1, s2} {
		wg.Add(1)
		go func() { defer wg.Done(); infos[i], errs[i] = s.Start(ctx, "both") }()
	}
	wg.Wait()
	for i := range infos {
		if errs[i] != nil || infos[i].Status != sandbox.StatusRunning {
			t.Fatalf("server %d: %+v %v", i+1, infos[i], errs[i])
		}
	}
	pods, err := b1.sandboxPods(ctx, "both")
	if err != nil || len(pods) != 1 {
		t.Fatalf("%d pods (%v), want 1", len(pods), err)
	}
	if r, _, err := s2.load(ctx, "both"); err != nil || r.Starting != nil {
		t.Errorf("record after the starts: %+v %v", r, err)
	}
	if err := s2.Remove(ctx, "both", false); !errors.Is(err, sandbox.ErrRunning) {
		t.Errorf("remove of a running sandbox without force: %v", err)
	}
	if _, err := s2.Stop(ctx, "both", "stopped by user"); err != nil {
		t.Fatal(err)
	}
	if i, err := s1.Get(ctx, "both"); err != nil || i.Status != sandbox.StatusStopped || i.StopReason != "stopped by user" {
		t.Errorf("after the other's stop: %+v %v", i, err)
	}
	if err := s2.Remove(ctx, "both", false); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Get(ctx, "both"); !errors.Is(err, sandbox.ErrSandboxNotFound) {
		t.Errorf("after the other's remove: %v", err)
	}
}

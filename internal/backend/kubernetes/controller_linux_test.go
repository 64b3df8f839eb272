package kubernetes

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestControllerWatches: with an interval of an hour, the controller
// still makes an AgentSandbox's pod within seconds of the object's
// creation (the watch woke it), and again after the server has ended
// its watches (1 s timeout here), which it opens again; deleting the
// object removes the sandbox just as promptly.
func TestControllerWatches(t *testing.T) {
	b := backend(t, Options{})
	b.watchTimeout = time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := b.InstallCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	var passes atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.RunController(ctx, time.Hour, func(Reconciled, Reaped, error) { passes.Add(1) })
	}()
	defer func() { cancel(); <-done }()
	sbs := b.dyn.Resource(SandboxResource).Namespace(b.Namespace())
	within := func(what string, d time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v (%d passes)", what, d, passes.Load())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	exists := func(name string) func() bool {
		return func() bool { _, err := b.Get(ctx, name); return err == nil }
	}
	// The first pass runs at start; wait for it, so that what follows is
	// the watches' doing.
	within("the first pass", 10*time.Second, func() bool { return passes.Load() >= 1 })
	for i, name := range []string{"wa", "wb"} {
		if i == 1 {
			time.Sleep(2500 * time.Millisecond) // the server ends the watches meanwhile
		}
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "agentkernel.io/v1alpha1", "kind": "AgentSandbox",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"image": "alpine:3.20"}}}
		if _, err := sbs.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		within("the pod of "+name, 5*time.Second, exists(name))
	}
	if err := sbs.Delete(ctx, "wa", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	within("wa's sandbox removed", 5*time.Second, func() bool { return !exists("wa")() })
}

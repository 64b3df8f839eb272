package kubernetes

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestWaitRunning: WaitRunning follows the pod through the watch: a pod
// that no node takes ends the wait at its timeout with ErrNotStarted and
// says so; a pod whose status turns Running (written here as a kubelet
// writes it: the API server's status subresource) ends it at once; a
// pod that fails says its container's reason; a missing sandbox is
// ErrNotFound; a hostile name is refused before any request.
func TestWaitRunning(t *testing.T) {
	b := backend(t, Options{})
	cs := admin(t)
	ctx := context.Background()
	if _, err := b.Create(ctx, &Request{Name: "w1", Image: "busybox", Profile: mustProfile(t, "moderate")}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := b.WaitRunning(ctx, "w1", 700*time.Millisecond)
	if !errors.Is(err, ErrNotStarted) || !strings.Contains(err.Error(), "Pending") {
		t.Errorf("a pod no node takes: %v, want ErrNotStarted naming Pending", err)
	}
	if d := time.Since(start); d < 600*time.Millisecond || d > 10*time.Second {
		t.Errorf("the wait took %v, want about its 700ms timeout", d)
	}

	setPhase := func(name string, phase corev1.PodPhase, cs0 []corev1.ContainerStatus) {
		t.Helper()
		pods, err := b.sandboxPods(ctx, name)
		if err != nil || len(pods) != 1 {
			t.Fatalf("pods of %s: %v %v", name, pods, err)
		}
		p := pods[0]
		p.Status.Phase = phase
		p.Status.ContainerStatuses = cs0
		if _, err := cs.CoreV1().Pods(b.Namespace()).UpdateStatus(ctx, &p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		s, err := b.WaitRunning(ctx, "w1", 20*time.Second)
		if err == nil && s.Phase != corev1.PodRunning {
			err = errors.New("returned a sandbox that is " + string(s.Phase))
		}
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	start = time.Now()
	setPhase("w1", corev1.PodRunning, nil)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("a pod turned Running: %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Running seen after %v", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("WaitRunning did not see the pod turn Running")
	}

	if _, err := b.Create(ctx, &Request{Name: "w2", Image: "busybox", Profile: mustProfile(t, "moderate")}); err != nil {
		t.Fatal(err)
	}
	setPhase("w2", corev1.PodFailed, []corev1.ContainerStatus{{Name: "sandbox", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 3, Message: "the image's entrypoint failed"}}}})
	if _, err := b.WaitRunning(ctx, "w2", 5*time.Second); !errors.Is(err, ErrNotStarted) || !strings.Contains(err.Error(), "exit 3") {
		t.Errorf("a failed pod: %v, want ErrNotStarted with its exit status", err)
	}
	if _, err := b.WaitRunning(ctx, "absent", time.Second); !errors.Is(err, ErrNotFound) {
		t.Errorf("a missing sandbox: %v", err)
	}
	if _, err := b.WaitRunning(ctx, "../x", time.Second); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("a hostile name: %v, want refused", err)
	}
}

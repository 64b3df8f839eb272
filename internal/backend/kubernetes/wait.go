package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
)

// ErrNotStarted means a sandbox's pod did not reach Running in time: no
// node started it (none fits, the image cannot be pulled, ...).
var ErrNotStarted = errors.New("the sandbox's pod did not start")

// WaitRunning waits, watching its pod, until the named sandbox is
// Running, at most timeout. A pod that fails, ends, or stays Pending
// past timeout is an error that says why, from the pod's own status
// (its containers' waiting reasons, the scheduler's condition).
func (b *Backend) WaitRunning(ctx context.Context, name string, timeout time.Duration) (*Sandbox, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sel := labels.Set{ManagedLabel: ManagedValue, SandboxLabel: name}.String()
	var last *corev1.Pod
	for {
		list, err := b.client.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, b.waitError(ctx, name, last, b.apiError("list pods", err))
		}
		if len(list.Items) == 0 {
			return nil, fmt.Errorf("sandbox %q: %w in namespace %s", name, ErrNotFound, b.ns)
		}
		last = &list.Items[0]
		if s, done, err := runningOrFailed(name, last); done {
			return s, err
		}
		w, err := b.client.CoreV1().Pods(b.ns).Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return nil, b.waitError(ctx, name, last, b.apiError("watch pods", err))
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted {
				w.Stop()
				return nil, fmt.Errorf("sandbox %q: its pod was deleted while it started", name)
			}
			last = p
			if s, done, err := runningOrFailed(name, p); done {
				w.Stop()
				return s, err
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return nil, b.waitError(ctx, name, last, ctx.Err())
		}
		// The watch ended early (the server closed it): list again.
	}
}

// runningOrFailed says whether p's phase ends the wait, and how.
func runningOrFailed(name string, p *corev1.Pod) (*Sandbox, bool, error) {
	switch p.Status.Phase {
	case corev1.PodRunning:
		s := sandboxOf(p)
		return &s, true, nil
	case corev1.PodFailed, corev1.PodSucceeded:
		return nil, true, fmt.Errorf("sandbox %q: its pod %s ended (%s)%s: %w", name, p.Name, p.Status.Phase, podWhy(p), ErrNotStarted)
	}
	return nil, false, nil
}

// waitError is the error of a wait that ctx ended.
func (b *Backend) waitError(ctx context.Context, name string, p *corev1.Pod, err error) error {
	if ctx.Err() == nil || p == nil {
		return err
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("sandbox %q: pod %s still %s%s: %w", name, p.Name, phaseOf(p), podWhy(p), ErrNotStarted)
	}
	return ctx.Err()
}

func phaseOf(p *corev1.Pod) corev1.PodPhase {
	if p.Status.Phase == "" {
		return corev1.PodPending
	}
	return p.Status.Phase
}

// podWhy is what the pod's status says of why it does not run, as
// ": reason (message); ..." or "" when it says nothing.
func podWhy(p *corev1.Pod) string {
	var why []string
	for _, c := range p.Status.Conditions {
		if c.Status == corev1.ConditionFalse && c.Reason != "" {
			why = append(why, strings.TrimSpace(c.Reason+" "+paren(c.Message)))
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			why = append(why, strings.TrimSpace(w.Reason+" "+paren(w.Message)))
		}
		if t := cs.State.Terminated; t != nil {
			why = append(why, strings.TrimSpace(fmt.Sprintf("%s (exit %d) %s", t.Reason, t.ExitCode, paren(t.Message))))
		}
	}
	if p.Spec.NodeName == "" && len(why) == 0 {
		why = append(why, "no node has taken it")
	}
	if len(why) == 0 {
		return ""
	}
	return ": " + strings.Join(why, "; ")
}

func paren(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return "(" + s + ")"
}

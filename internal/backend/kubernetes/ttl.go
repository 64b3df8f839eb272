package kubernetes

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// orphanGrace is how old a sandbox's NetworkPolicy must be, with no pod
// of its sandbox, before Reap deletes it: Create makes the policy a
// moment before the pod, and a pool's adoption relabels the pod after.
const orphanGrace = 2 * time.Minute

// Reaped says what one Reap deleted.
type Reaped struct {
	Expired []string // sandboxes whose TTL had passed
	Orphans []string // NetworkPolicies left without a pod

}

// Reap deletes the sandboxes whose TTL has passed (pod and policy) and
// the policies left without a pod. It touches only objects labelled as
// ours; sandboxes owned by an AgentSandbox are the reconciler's.
func (b *Backend) Reap(ctx context.Context) (Reaped, error) {
	var r Reaped
	now := b.opts.Now()
	pods, err := b.client.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{LabelSelector: managedSelector()})
	if err != nil {
		return r, b.apiError("list pods", err)
	}
	live := map[string]bool{}
	for _, p := range pods.Items {
		name := p.Labels[SandboxLabel]
		if ValidName(name) != nil {
			continue
		}
		if p.Labels[OwnerLabel] != "" {
			// The custom resource's reconciler owns its TTL.
			live[name] = true
			continue
		}
		if t, ok := expiresAt(p.Annotations); ok && !now.Before(t) {
			if err := b.Remove(ctx, name); err != nil && !isNotFound(err) {
				return r, err
			}
			r.Expired = append(r.Expired, name)
			continue
		}
		live[name] = true
	}
	nps, err := b.client.NetworkingV1().NetworkPolicies(b.ns).List(ctx, metav1.ListOptions{LabelSelector: managedSelector()})
	if err != nil {
		return r, b.apiError("list network policies", err)
	}
	for _, np := range nps.Items {
		name := np.Labels[SandboxLabel]
		if ValidName(name) != nil || live[name] || np.Labels[OwnerLabel] != "" {
			continue
		}
		if now.Sub(np.CreationTimestamp.Time) < orphanGrace {
			continue
		}
		err := b.client.NetworkingV1().NetworkPolicies(b.ns).Delete(ctx, np.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &np.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return r, b.apiError("delete network policy", err)
		}
		r.Orphans = append(r.Orphans, np.Name)
	}
	return r, nil
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, ErrNotFound) }

// poolSelector selects a pool's waiting pods.
func poolSelector(pool string) string {
	return labels.Set{ManagedLabel: ManagedValue, PoolLabel: pool}.String()
}

// ReapLoop runs Reap every interval until ctx ends, reporting each
// pass's error to report (nil: ignored).
func (b *Backend) ReapLoop(ctx context.Context, interval time.Duration, report func(Reaped, error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		r, err := b.Reap(ctx)
		if report != nil {
			report(r, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

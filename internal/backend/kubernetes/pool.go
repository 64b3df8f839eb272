package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Pool is a warm pool: Size pods of Image under Profile, started ahead
// of the sandboxes that will adopt them. While they wait, a pool-wide
// NetworkPolicy gives them no network at all.
type Pool struct {
	Name    string // a DNS label, at most MaxNameLen-5 characters
	Image   string
	Profile Profile
	Size    int
}

func (p *Pool) check() error {
	if err := ValidName(p.Name); err != nil {
		return fmt.Errorf("pool name: %w", err)
	}
	if len(p.Name) > MaxNameLen-5 {
		return fmt.Errorf("pool name %q is longer than %d characters", p.Name, MaxNameLen-5)
	}
	if p.Size < 0 || p.Size > 1000 {
		return fmt.Errorf("pool size %d is out of range (0 to 1000)", p.Size)
	}
	return checkImage(p.Image)
}

// poolPod is a pool's waiting pod: a sandbox's pod without a sandbox
// name, its labels the pool's.
func (b *Backend) poolPod(p *Pool) *corev1.Pod {
	r := &Request{Name: "pool", Image: p.Image, Profile: p.Profile, Network: NetworkNone}
	pod := buildPod(b.podOptions(), r, b.opts.Now())
	pod.Name = ""
	pod.GenerateName = objectPrefix + "pool-" + p.Name + "-"
	pod.Labels = map[string]string{ManagedLabel: ManagedValue, PoolLabel: p.Name, ProfileLabel: p.Profile.Name}
	delete(pod.Annotations, NetworkAnnotation)
	return pod
}

// Fill brings the pool to Size waiting pods: ended ones are deleted,
// missing ones created. It returns how many it created.
func (b *Backend) Fill(ctx context.Context, p *Pool) (int, error) {
	if err := p.check(); err != nil {
		return 0, err
	}
	np := buildPolicy(b.ns, poolPolicyName(p.Name), map[string]string{ManagedLabel: ManagedValue, PoolLabel: p.Name}, NetworkNone, nil,
		map[string]string{ManagedLabel: ManagedValue, PoolLabel: p.Name})
	if _, err := b.client.NetworkingV1().NetworkPolicies(b.ns).Create(ctx, np, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return 0, b.apiError("create pool network policy", err)
	}
	pods, err := b.client.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{LabelSelector: poolSelector(p.Name)})
	if err != nil {
		return 0, b.apiError("list pool pods", err)
	}
	have := 0
	for _, pod := range pods.Items {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || pod.DeletionTimestamp != nil {
			if pod.DeletionTimestamp == nil {
				_ = b.client.CoreV1().Pods(b.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{})
			}
			continue
		}
		have++
	}
	made := 0
	for ; have < p.Size; have++ {
		if _, err := b.client.CoreV1().Pods(b.ns).Create(ctx, b.poolPod(p), metav1.CreateOptions{}); err != nil {
			return made, b.apiError("create pool pod", err)
		}
		made++
	}
	return made, nil
}

// Waiting counts a pool's pods that wait for a sandbox.
func (b *Backend) Waiting(ctx context.Context, pool string) (int, error) {
	pods, err := b.client.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{LabelSelector: poolSelector(pool)})
	if err != nil {
		return 0, b.apiError("list pool pods", err)
	}
	n := 0
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			n++
		}
	}
	return n, nil
}

// Drain deletes a pool's waiting pods and its policy.
func (b *Backend) Drain(ctx context.Context, pool string) error {
	if err := ValidName(pool); err != nil {
		return fmt.Errorf("pool name: %w", err)
	}
	err := b.client.CoreV1().Pods(b.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: poolSelector(pool)})
	if err != nil {
		return b.apiError("delete pool pods", err)
	}
	err = b.client.NetworkingV1().NetworkPolicies(b.ns).Delete(ctx, poolPolicyName(pool), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return b.apiError("delete pool network policy", err)
	}
	return nil
}

// errPoolEmpty: no waiting pod could be adopted.
var errPoolEmpty = errors.New("pool has no waiting pod")

// CreateFromPool creates r's sandbox by adopting one of the pool's
// waiting pods when the pool fits r (same image and profile, no other
// limits or environment), else as Create does. adopted says which.
//
// Adoption: r's NetworkPolicy is created first (it claims the name, as
// in Create), then one waiting pod's labels are rewritten from the
// pool's to the sandbox's in a single update that carries the pod's
// resourceVersion, so that two adopters never take the same pod; the
// pod leaves the pool's policy and enters the sandbox's at once.
func (b *Backend) CreateFromPool(ctx context.Context, p *Pool, r *Request) (s *Sandbox, adopted bool, err error) {
	if err := b.check(r); err != nil {
		return nil, false, err
	}
	// A pool's pods have no egress proxy: a domain list needs a pod made
	// with one.
	if p == nil || p.Image != r.Image || p.Profile.Name != r.Profile.Name || r.MemoryMB > 0 || r.CPUPercent > 0 || len(r.Env) > 0 || r.Network == NetworkProxy {
		s, err := b.Create(ctx, r)
		return s, false, err
	}
	// The pool's pods are listed while the name is claimed: the list is
	// only read once the claim is made, and an adoption from a list
	// that has aged (a pod taken or gone since) fails on the pod's
	// resourceVersion and tries the next.
	var (
		pods *corev1.PodList
		lerr error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		pods, lerr = b.listPool(ctx, p.Name)
	}()
	err = b.claimWith(ctx, r, nil, nil)
	<-done
	if err != nil {
		return nil, false, err
	}
	if lerr != nil {
		s, err = nil, lerr
	} else {
		s, err = b.adopt(ctx, p, r, pods)
	}
	if err == nil {
		return s, true, nil
	}
	if !errors.Is(err, errPoolEmpty) {
		b.deletePolicy(context.WithoutCancel(ctx), r.Name)
		return nil, false, err
	}
	// Nothing waiting: a pod of its own, under the policy already made.
	pod := buildPod(b.podOptions(), r, b.opts.Now())
	got, err := b.createPod(ctx, pod)
	if err != nil {
		b.deletePolicy(context.WithoutCancel(ctx), r.Name)
		return nil, false, err
	}
	sb := sandboxOf(got)
	return &sb, false, nil
}

// listPool lists a pool's pods.
func (b *Backend) listPool(ctx context.Context, pool string) (*corev1.PodList, error) {
	pods, err := b.client.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{LabelSelector: poolSelector(pool)})
	if err != nil {
		return nil, b.apiError("list pool pods", err)
	}
	return pods, nil
}

// adopt takes one of pods, the pool's pods as listed, for r.
func (b *Backend) adopt(ctx context.Context, p *Pool, r *Request, pods *corev1.PodList) (*Sandbox, error) {
	// Running pods first: they are the warm ones.
	order := make([]*corev1.Pod, 0, len(pods.Items))
	for i := range pods.Items {
		if pods.Items[i].Status.Phase == corev1.PodRunning {
			order = append(order, &pods.Items[i])
		}
	}
	for i := range pods.Items {
		if ph := pods.Items[i].Status.Phase; ph == corev1.PodPending || ph == "" {
			order = append(order, &pods.Items[i])
		}
	}
	net, _ := r.network()
	for _, pod := range order {
		if pod.DeletionTimestamp != nil || pod.Annotations[ImageAnnotation] != r.Image || pod.Labels[ProfileLabel] != r.Profile.Name {
			continue
		}
		pod = pod.DeepCopy()
		delete(pod.Labels, PoolLabel)
		pod.Labels[SandboxLabel] = r.Name
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[NetworkAnnotation] = string(net)
		if r.TTL > 0 {
			pod.Annotations[ExpiresAnnotation] = b.opts.Now().Add(r.TTL).UTC().Format(time.RFC3339)
		}
		got, err := b.client.CoreV1().Pods(b.ns).Update(ctx, pod, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			continue // another adopter took it
		}
		if err != nil {
			return nil, b.apiError("adopt pool pod", err)
		}
		s := sandboxOf(got)
		return &s, nil
	}
	return nil, errPoolEmpty
}

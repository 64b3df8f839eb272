package kubernetes

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// CRDs are the CustomResourceDefinitions of AgentSandbox and
// AgentSandboxPool (agentkernel.io/v1alpha1) as a JSON list.
//
//go:embed crds.json
var CRDs []byte

// The custom resources' API.
var (
	SandboxResource = schema.GroupVersionResource{Group: "agentkernel.io", Version: "v1alpha1", Resource: "agentsandboxes"}
	PoolResource    = schema.GroupVersionResource{Group: "agentkernel.io", Version: "v1alpha1", Resource: "agentsandboxpools"}
	crdResource     = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// ownerKind is OwnerLabel's value on what an AgentSandbox owns.
const ownerKind = "AgentSandbox"

// InstallCRDs creates the CRDs (or updates them to this version's) and
// waits until the API serves them.
func (b *Backend) InstallCRDs(ctx context.Context) error {
	var objs []map[string]any
	if err := json.Unmarshal(CRDs, &objs); err != nil {
		return fmt.Errorf("built-in CRDs: %w", err)
	}
	api := b.dyn.Resource(crdResource)
	for _, o := range objs {
		u := &unstructured.Unstructured{Object: o}
		_, err := api.Create(ctx, u, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cur, gerr := api.Get(ctx, u.GetName(), metav1.GetOptions{})
			if gerr != nil {
				return b.apiError("get CRD", gerr)
			}
			u.SetResourceVersion(cur.GetResourceVersion())
			_, err = api.Update(ctx, u, metav1.UpdateOptions{})
		}
		if err != nil {
			return b.apiError("install CRD "+u.GetName(), err)
		}
	}
	for _, o := range objs {
		name := (&unstructured.Unstructured{Object: o}).GetName()
		if err := b.waitEstablished(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

func (b *Backend) waitEstablished(ctx context.Context, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		u, err := b.dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return b.apiError("get CRD", err)
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CRD %s not established after 30s", name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Reconciled says what one Reconcile pass did.
type Reconciled struct {
	Created []string // sandboxes created for AgentSandbox objects
	Expired []string // AgentSandbox objects whose TTL passed (sandbox removed)
	Removed []string // sandboxes whose AgentSandbox is gone
	Failed  []string // AgentSandbox objects that cannot be made ("name: why")
	Filled  int      // pool pods created
}

// Reconcile makes the namespace's sandboxes match its AgentSandbox and
// AgentSandboxPool objects, once: each pool is filled to its size; each
// AgentSandbox gets its pod and NetworkPolicy (labelled with OwnerLabel
// and with an owner reference, so that a cluster's garbage collector also
// removes them with it), adopted from its pool when it names one, and a
// status (phase, podName, startedAt); an expired one loses its sandbox
// and reads phase Expired; a sandbox whose AgentSandbox is gone is
// removed.
func (b *Backend) Reconcile(ctx context.Context) (Reconciled, error) {
	var out Reconciled
	pools, err := b.reconcilePools(ctx, &out)
	if err != nil {
		return out, err
	}
	list, err := b.dyn.Resource(SandboxResource).Namespace(b.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return out, b.apiError("list AgentSandbox", err)
	}
	want := map[string]bool{}
	for i := range list.Items {
		u := &list.Items[i]
		want[u.GetName()] = true
		if err := b.reconcileOne(ctx, u, pools, &out); err != nil {
			return out, err
		}
	}
	pods, err := b.client.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{LabelSelector: OwnerLabel + "=" + ownerKind + "," + managedSelector()})
	if err != nil {
		return out, b.apiError("list pods", err)
	}
	for _, p := range pods.Items {
		name := p.Labels[SandboxLabel]
		if want[name] || ValidName(name) != nil {
			continue
		}
		if err := b.Remove(ctx, name); err != nil && !errors.Is(err, ErrNotFound) {
			return out, err
		}
		out.Removed = append(out.Removed, name)
	}
	return out, nil
}

// fatal are the API failures that end a pass: the same would happen to
// every object.
func fatal(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)
}

func (b *Backend) reconcilePools(ctx context.Context, out *Reconciled) (map[string]*Pool, error) {
	list, err := b.dyn.Resource(PoolResource).Namespace(b.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, b.apiError("list AgentSandboxPool", err)
	}
	pools := map[string]*Pool{}
	for i := range list.Items {
		u := &list.Items[i]
		image, _, _ := unstructured.NestedString(u.Object, "spec", "image")
		prof, _, _ := unstructured.NestedString(u.Object, "spec", "securityProfile")
		size, _, _ := unstructured.NestedInt64(u.Object, "spec", "size")
		status := map[string]any{}
		p, err := LookupProfile(prof)
		pool := &Pool{Name: u.GetName(), Image: image, Profile: p, Size: int(size)}
		if err == nil {
			err = pool.check()
		}
		if err == nil {
			var n int
			n, err = b.Fill(ctx, pool)
			out.Filled += n
			if fatal(err) {
				return nil, err
			}
		}
		if err != nil {
			status["message"] = err.Error()
		} else {
			pools[pool.Name] = pool
			ready, werr := b.Waiting(ctx, pool.Name)
			if werr != nil {
				return nil, werr
			}
			status["ready"] = int64(ready)
		}
		b.setStatus(ctx, PoolResource, u, status)
	}
	return pools, nil
}

// requestOf reads an AgentSandbox's spec; pool is the AgentSandboxPool
// it names ("" for none).
func requestOf(u *unstructured.Unstructured) (r *Request, pool string, err error) {
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	str := func(path ...string) string {
		v, _, _ := unstructured.NestedString(spec, path...)
		return v
	}
	p, err := LookupProfile(str("securityProfile"))
	if err != nil {
		return nil, "", err
	}
	r = &Request{Name: u.GetName(), Image: str("image"), Profile: p}
	if m := str("resources", "memory"); m != "" {
		q, err := resource.ParseQuantity(m)
		if err != nil || q.Sign() <= 0 {
			return nil, "", fmt.Errorf("resources.memory %q is not a positive quantity such as 512Mi", m)
		}
		r.MemoryMB = (q.Value() + 1<<20 - 1) >> 20
	}
	if c := str("resources", "cpu"); c != "" {
		q, err := resource.ParseQuantity(c)
		if err != nil || q.Sign() <= 0 {
			return nil, "", fmt.Errorf("resources.cpu %q is not a positive quantity such as 500m", c)
		}
		r.CPUPercent = (q.MilliValue() + 9) / 10
	}
	if n := str("network"); n != "" {
		r.Network, r.AllowCIDRs, r.AllowDomains, err = ParseNetwork(n)
		if err != nil {
			return nil, "", err
		}
	}
	if t := str("ttl"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			return nil, "", fmt.Errorf("ttl %q is not a positive duration such as 1h", t)
		}
		r.TTL = d
	}
	return r, str("pool"), r.Check()
}

func (b *Backend) reconcileOne(ctx context.Context, u *unstructured.Unstructured, pools map[string]*Pool, out *Reconciled) error {
	name := u.GetName()
	failed := func(msg string) {
		out.Failed = append(out.Failed, name+": "+msg)
		b.setStatus(ctx, SandboxResource, u, map[string]any{"phase": "Failed", "message": msg})
	}
	r, poolName, err := requestOf(u)
	if err != nil {
		failed(err.Error())
		return nil
	}
	if r.TTL > 0 && !b.opts.Now().Before(u.GetCreationTimestamp().Add(r.TTL)) {
		if err := b.Remove(ctx, name); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if ph, _, _ := unstructured.NestedString(u.Object, "status", "phase"); ph != "Expired" {
			out.Expired = append(out.Expired, name)
		}
		b.setStatus(ctx, SandboxResource, u, map[string]any{"phase": "Expired", "message": "ttl " + r.TTL.String() + " passed"})
		return nil
	}
	pods, err := b.sandboxPods(ctx, name)
	if err != nil {
		return err
	}
	if len(pods) > 0 && pods[0].Labels[OwnerLabel] != ownerKind {
		failed("a sandbox of this name exists that this object did not make: remove it or rename the object")
		return nil
	}
	if len(pods) == 0 {
		// The TTL counts from the object's creation, not the pod's.
		if r.TTL > 0 {
			r.TTL = u.GetCreationTimestamp().Add(r.TTL).Sub(b.opts.Now())
		}
		if err := b.createOwned(ctx, r, u, pools[poolName]); err != nil {
			if fatal(err) {
				return err
			}
			failed(err.Error())
			return nil
		}
		out.Created = append(out.Created, name)
		if pods, err = b.sandboxPods(ctx, name); err != nil {
			return err
		}
		if len(pods) == 0 {
			return fmt.Errorf("sandbox %q: its pod vanished after creation", name)
		}
	}
	pod := &pods[0]
	phase := string(pod.Status.Phase)
	if phase == "" {
		phase = string(corev1.PodPending)
	}
	started := pod.CreationTimestamp.Time
	if pod.Status.StartTime != nil {
		started = pod.Status.StartTime.Time
	}
	b.setStatus(ctx, SandboxResource, u, map[string]any{"phase": phase, "podName": pod.Name, "startedAt": started.UTC().Format(time.RFC3339)})
	return nil
}

// createOwned creates r's sandbox for the AgentSandbox u, adopting a pod
// of pool when it fits, with OwnerLabel and an owner reference to u on
// its pod and policy.
func (b *Backend) createOwned(ctx context.Context, r *Request, u *unstructured.Unstructured, pool *Pool) error {
	t := true
	ref := metav1.OwnerReference{APIVersion: SandboxResource.GroupVersion().String(), Kind: ownerKind, Name: u.GetName(), UID: u.GetUID(), Controller: &t}
	extra := map[string]string{OwnerLabel: ownerKind}
	if err := b.check(r); err != nil {
		return err
	}
	if err := b.claimWith(ctx, r, extra, &ref); err != nil {
		return err
	}
	if pool != nil && r.Network != NetworkProxy && pool.Image == r.Image && pool.Profile.Name == r.Profile.Name && r.MemoryMB == 0 && r.CPUPercent == 0 {
		pods, err := b.listPool(ctx, pool.Name)
		var s *Sandbox
		if err == nil {
			s, err = b.adopt(ctx, pool, r, pods)
		}
		if err == nil {
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
				"labels":          map[string]string{OwnerLabel: ownerKind},
				"ownerReferences": []metav1.OwnerReference{ref},
			}})
			if _, err := b.client.CoreV1().Pods(b.ns).Patch(ctx, s.Pod, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return b.apiError("label adopted pod", err)
			}
			return nil
		}
		if !errors.Is(err, errPoolEmpty) {
			b.deletePolicy(context.WithoutCancel(ctx), r.Name)
			return err
		}
	}
	pod := buildPod(b.podOptions(), r, b.opts.Now())
	for k, v := range extra {
		pod.Labels[k] = v
	}
	pod.OwnerReferences = []metav1.OwnerReference{ref}
	if _, err := b.createPod(ctx, pod); err != nil {
		b.deletePolicy(context.WithoutCancel(ctx), r.Name)
		return err
	}
	return nil
}

// setStatus writes status to u's status subresource when it differs.
// A conflict (the object changed meanwhile) is left to the next pass.
func (b *Backend) setStatus(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured, status map[string]any) {
	cur, _, _ := unstructured.NestedMap(u.Object, "status")
	ja, _ := json.Marshal(cur)
	jb, _ := json.Marshal(status)
	if string(ja) == string(jb) {
		return
	}
	u = u.DeepCopy()
	u.Object["status"] = status
	_, _ = b.dyn.Resource(gvr).Namespace(b.ns).UpdateStatus(ctx, u, metav1.UpdateOptions{})
}

// Pass is one pass of the controller: Reconcile, then Reap.
func (b *Backend) Pass(ctx context.Context) (Reconciled, Reaped, error) {
	rc, err := b.Reconcile(ctx)
	if err != nil {
		return rc, Reaped{}, err
	}
	rp, err := b.Reap(ctx)
	return rc, rp, err
}

// RunController reconciles and reaps until ctx ends: what
// `agentkernel-kube controller` runs in the cluster. A pass runs as soon
// as an AgentSandbox, an AgentSandboxPool or one of the backend's pods
// changes (watches on the three, restarted when the server ends them),
// and every interval whatever happened (TTLs pass without an event; a
// missed event is made up for). report (may be nil) hears of each pass.
func (b *Backend) RunController(ctx context.Context, interval time.Duration, report func(Reconciled, Reaped, error)) {
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, w := range []func(context.Context, metav1.ListOptions) (watch.Interface, error){
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return b.dyn.Resource(SandboxResource).Namespace(b.ns).Watch(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return b.dyn.Resource(PoolResource).Namespace(b.ns).Watch(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = managedSelector()
			return b.client.CoreV1().Pods(b.ns).Watch(ctx, o)
		},
	} {
		go b.watchLoop(ctx, w, poke)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rc, rp, err := b.Pass(ctx)
		if report != nil && ctx.Err() == nil {
			report(rc, rp, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
			// Changes come in bursts (a pass's own creations among
			// them): one pass for the burst.
			select {
			case <-ctx.Done():
				return
			case <-time.After(controllerSettle):
			}
		}
	}
}

// controllerSettle is how long the controller lets a burst of changes
// settle before its pass.
const controllerSettle = 100 * time.Millisecond

// watchLoop keeps one watch open until ctx ends, calling poke on every
// event and each time the watch is (re)opened, since events may have
// been missed meanwhile. A watch the server ends (its timeout, a
// restart) or that fails to open is opened again after a pause.
func (b *Backend) watchLoop(ctx context.Context, open func(context.Context, metav1.ListOptions) (watch.Interface, error), poke func()) {
	pause := 200 * time.Millisecond
	for ctx.Err() == nil {
		secs := int64(b.watchTimeout / time.Second)
		w, err := open(ctx, metav1.ListOptions{TimeoutSeconds: &secs, AllowWatchBookmarks: false})
		if err == nil {
			poke()
			pause = 200 * time.Millisecond
			for range w.ResultChan() {
				poke()
			}
			w.Stop()
		} else {
			pause = min(pause*2, 10*time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

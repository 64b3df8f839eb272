package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Options configure the backend ([orchestrator] in configuration).
type Options struct {
	// Kubeconfig is the kubeconfig file; "" means $KUBECONFIG, then
	// ~/.kube/config, unless InCluster.
	Kubeconfig string
	// Context is the kubeconfig context; "" means its current one.
	Context string
	// InCluster uses the pod's service account (agentkernel running in
	// the cluster), ignoring Kubeconfig.
	InCluster bool
	// Namespace for every object; "" means the kubeconfig context's, then
	// "default".
	Namespace string
	// RuntimeClass names the pods' runtimeClassName (gvisor, kata); "" is
	// the cluster's default runtime.
	RuntimeClass string
	// ServiceAccount is the pods' service account ("" is the namespace's
	// default). Its token is never mounted.
	ServiceAccount string
	// NoUserNamespace leaves hostUsers unset, for clusters whose nodes
	// cannot give pods a user namespace.
	NoUserNamespace bool
	// EgressImage is the image of a domain-list sandbox's egress proxy
	// (one holding agentkernel-full at kubeegress.DefaultBinary, such as
	// the one serve runs from); "" refuses domain lists.
	EgressImage string
	// EgressResolvers are the DNS servers the egress proxy asks
	// ("ADDR:PORT"); none: the pod's own (the cluster's DNS).
	EgressResolvers []string
	// Now is the clock (nil: time.Now); tests move it for TTLs.
	Now func() time.Time
}

// Backend creates, lists and removes sandboxes as pods, each with its
// NetworkPolicy, in one namespace.
type Backend struct {
	opts   Options
	ns     string
	client kubernetes.Interface
	dyn    dynamic.Interface
	cfg    *rest.Config
	// watchTimeout is how long the controller asks each watch to last
	// before the server ends it and it is opened again.
	watchTimeout time.Duration
}

// RestConfig reads the client configuration Options name.
func RestConfig(o Options) (*rest.Config, string, error) {
	if o.InCluster {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, "", fmt.Errorf("in-cluster configuration: %w (run inside a pod, or set [orchestrator] kubeconfig)", err)
		}
		ns := o.Namespace
		if ns == "" {
			if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
				ns = string(b)
			}
		}
		return cfg, ns, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.Context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w (set [orchestrator] kubeconfig or $KUBECONFIG)", err)
	}
	ns := o.Namespace
	if ns == "" {
		if n, _, err := cc.Namespace(); err == nil {
			ns = n
		}
	}
	return cfg, ns, nil
}

// New connects to the cluster Options name. It makes no API call.
func New(o Options) (*Backend, error) {
	cfg, ns, err := RestConfig(o)
	if err != nil {
		return nil, err
	}
	if o.Namespace == "" {
		o.Namespace = ns
	}
	return NewForConfig(cfg, o)
}

// NewForConfig is New with a client configuration at hand.
func NewForConfig(cfg *rest.Config, o Options) (*Backend, error) {
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if err := validNamespace(o.Namespace); err != nil {
		return nil, err
	}
	if o.RuntimeClass != "" {
		if err := validObjectName(o.RuntimeClass); err != nil {
			return nil, fmt.Errorf("runtime_class: %w", err)
		}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "agentkernel"
	if cfg.QPS == 0 {
		// client-go's default (5/s) would make creating sandboxes wait on
		// the client, not on the cluster.
		cfg.QPS, cfg.Burst = 100, 200
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &Backend{opts: o, ns: o.Namespace, client: cs, dyn: dc, cfg: cfg, watchTimeout: 5 * time.Minute}, nil
}

// Namespace is where the backend's objects are.
func (b *Backend) Namespace() string { return b.ns }

func validNamespace(ns string) error {
	if len(ns) > 63 || ValidName(shortened(ns)) != nil {
		return fmt.Errorf("namespace %q is not a DNS label: lower-case letters, digits and '-'", ns)
	}
	return nil
}

// shortened lets ValidName check a namespace, which may be longer than a
// sandbox name (63, not MaxNameLen): only its characters matter there.
func shortened(ns string) string {
	if len(ns) > MaxNameLen {
		return ns[:MaxNameLen-1] + ns[len(ns)-1:]
	}
	return ns
}

// validObjectName accepts a DNS subdomain (RuntimeClass names).
func validObjectName(s string) error {
	if s == "" || len(s) > 253 {
		return fmt.Errorf("%q is not a valid name", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return fmt.Errorf("%q is not a valid name: lower-case letters, digits, '-' and '.'", s)
		}
	}
	return nil
}

func (b *Backend) podOptions() podOptions {
	return podOptions{Namespace: b.ns, RuntimeClass: b.opts.RuntimeClass, NoUserNamespace: b.opts.NoUserNamespace, ServiceAccount: b.opts.ServiceAccount,
		EgressImage: b.opts.EgressImage, EgressResolvers: b.opts.EgressResolvers}
}

// ErrExists is returned by Create for a name already in use.
var ErrExists = errors.New("sandbox already exists")

// ErrNotFound is returned for a name with no sandbox.
var ErrNotFound = errors.New("no such sandbox")

// Sandbox is one sandbox as List shows it.
type Sandbox struct {
	Name      string
	Pod       string
	Phase     corev1.PodPhase
	Image     string
	Profile   string
	Network   string
	Created   time.Time
	ExpiresAt time.Time // zero: no TTL
	// UserNamespace is whether the API kept hostUsers: false (a cluster
	// without the feature drops the field).
	UserNamespace bool
	Owner         string // "AgentSandbox" when the custom resource owns it
	// Removing: the pod is being deleted (its grace period runs).
	Removing bool
}

// Create makes r's NetworkPolicy, then its pod. The policy comes first,
// so that the pod never runs unfenced, and its name (unique per sandbox)
// is what claims the sandbox's name: a second Create of the same name
// fails with ErrExists before it makes anything.
func (b *Backend) Create(ctx context.Context, r *Request) (*Sandbox, error) {
	return b.create(ctx, r, nil)
}

// check is r.Check and what the backend's settings add: a domain list
// needs the egress proxy's image.
func (b *Backend) check(r *Request) error {
	if err := r.Check(); err != nil {
		return err
	}
	if n, _ := r.network(); n == NetworkProxy && b.opts.EgressImage == "" {
		return fmt.Errorf("a domain allow- or block-list needs the egress proxy's image: set [orchestrator] egress_image to an image holding agentkernel-full (docs/kubernetes.md): %w", sandbox.ErrUnsupported)
	}
	return nil
}

func (b *Backend) create(ctx context.Context, r *Request, extraLabels map[string]string) (*Sandbox, error) {
	if err := b.check(r); err != nil {
		return nil, err
	}
	if err := b.claimWith(ctx, r, extraLabels, nil); err != nil {
		return nil, err
	}
	pod := buildPod(b.podOptions(), r, b.opts.Now())
	for k, v := range extraLabels {
		pod.Labels[k] = v
	}
	got, err := b.createPod(ctx, pod)
	if err != nil {
		b.deletePolicy(context.WithoutCancel(ctx), r.Name)
		if apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("sandbox %q: %w (remove it first)", r.Name, ErrExists)
		}
		return nil, err
	}
	s := sandboxOf(got)
	return &s, nil
}

// errNoSidecars: the API server stored an egress pod without its
// sidecar's restartPolicy (a cluster older than 1.29, or the
// SidecarContainers feature off), which would leave the pod waiting on
// the proxy as an init container forever.
var errNoSidecars = errors.New("this cluster does not run sidecar containers (Kubernetes 1.29 or later, feature SidecarContainers), which a domain list's egress proxy is: give address ranges instead")

// createPod creates pod and checks that the API server kept what the
// sandbox depends on: an egress proxy's sidecar stays a sidecar, or the
// pod is deleted again.
func (b *Backend) createPod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	got, err := b.client.CoreV1().Pods(b.ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, b.apiError("create pod", err)
	}
	if err := checkSidecars(got); err != nil {
		_ = b.client.CoreV1().Pods(b.ns).Delete(context.WithoutCancel(ctx), got.Name, metav1.DeleteOptions{})
		return nil, err
	}
	return got, nil
}

// checkSidecars refuses a stored pod whose init containers lost the
// restartPolicy that makes them sidecars.
func checkSidecars(p *corev1.Pod) error {
	for _, c := range p.Spec.InitContainers {
		if c.Name == "egress" && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
			return fmt.Errorf("%w: %w", errNoSidecars, sandbox.ErrUnsupported)
		}
	}
	return nil
}

// claimWith creates the sandbox's NetworkPolicy, with extra labels and
// an owner (may be nil).
func (b *Backend) claimWith(ctx context.Context, r *Request, extra map[string]string, owner *metav1.OwnerReference) error {
	net, cidrs := r.network()
	lbl := map[string]string{SandboxLabel: r.Name, ManagedLabel: ManagedValue}
	for k, v := range extra {
		lbl[k] = v
	}
	np := buildPolicy(b.ns, PolicyName(r.Name), map[string]string{SandboxLabel: r.Name, ManagedLabel: ManagedValue}, net, cidrs, lbl)
	if owner != nil {
		np.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	if _, err := b.client.NetworkingV1().NetworkPolicies(b.ns).Create(ctx, np, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("sandbox %q: %w (remove it first)", r.Name, ErrExists)
		}
		return b.apiError("create network policy", err)
	}
	return nil
}

func (b *Backend) deletePolicy(ctx context.Context, name string) {
	_ = b.client.NetworkingV1().NetworkPolicies(b.ns).Delete(ctx, PolicyName(name), metav1.DeleteOptions{})
}

func sandboxOf(p *corev1.Pod) Sandbox {
	s := Sandbox{
		Name:    p.Labels[SandboxLabel],
		Pod:     p.Name,
		Phase:   p.Status.Phase,
		Image:   p.Annotations[ImageAnnotation],
		Profile: p.Labels[ProfileLabel],
		Network: p.Annotations[NetworkAnnotation],
		Created: p.CreationTimestamp.Time,
		Owner:   p.Labels[OwnerLabel],
	}
	if s.Phase == "" {
		s.Phase = corev1.PodPending
	}
	if t, ok := expiresAt(p.Annotations); ok {
		s.ExpiresAt = t
	}
	s.UserNamespace = p.Spec.HostUsers != nil && !*p.Spec.HostUsers
	s.Removing = p.DeletionTimestamp != nil
	return s
}

// managedSelector selects the sandboxes' pods (not the pools').
func managedSelector() string {
	return labels.Set{ManagedLabel: ManagedValue}.String() + "," + SandboxLabel
}

// List returns the namespace's sandboxes, by name.
func (b *Backend) List(ctx context.Context) ([]Sandbox, error) {
	pods, err := b.client.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{LabelSelector: managedSelector()})
	if err != nil {
		return nil, b.apiError("list pods", err)
	}
	out := make([]Sandbox, 0, len(pods.Items))
	for i := range pods.Items {
		out = append(out, sandboxOf(&pods.Items[i]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Get returns the named sandbox.
func (b *Backend) Get(ctx context.Context, name string) (*Sandbox, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	pods, err := b.sandboxPods(ctx, name)
	if err != nil {
		return nil, err
	}
	if len(pods) == 0 {
		return nil, fmt.Errorf("sandbox %q: %w in namespace %s", name, ErrNotFound, b.ns)
	}
	s := sandboxOf(&pods[0])
	return &s, nil
}

func (b *Backend) sandboxPods(ctx context.Context, name string) ([]corev1.Pod, error) {
	sel := labels.Set{ManagedLabel: ManagedValue, SandboxLabel: name}.String()
	pods, err := b.client.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, b.apiError("list pods", err)
	}
	return pods.Items, nil
}

// Remove deletes the named sandbox's pod and its NetworkPolicy (the
// policy last, so that the pod is never unfenced while it ends: a pod on
// a node runs on through its grace period, so Remove waits until the pod
// is gone, up to removeWait, before it deletes the policy; a pod that
// outlives that keeps its policy, which the reaper deletes once the pod
// is gone). It fails with ErrNotFound when there was neither.
func (b *Backend) Remove(ctx context.Context, name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	pods, err := b.sandboxPods(ctx, name)
	if err != nil {
		return err
	}
	found := false
	for _, p := range pods {
		err := b.client.CoreV1().Pods(b.ns).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if err == nil {
			found = true
		} else if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return b.apiError("delete pod", err)
		}
	}
	if found {
		gone, err := b.waitPodsGone(ctx, name, removeWait)
		if err != nil {
			return err
		}
		if !gone {
			return nil
		}
	}
	err = b.client.NetworkingV1().NetworkPolicies(b.ns).Delete(ctx, PolicyName(name), metav1.DeleteOptions{})
	switch {
	case err == nil:
		found = true
	case apierrors.IsNotFound(err):
	default:
		return b.apiError("delete network policy", err)
	}
	if !found {
		return fmt.Errorf("sandbox %q: %w in namespace %s", name, ErrNotFound, b.ns)
	}
	return nil
}

// removeWait is how long Remove waits for a sandbox's pod to end before
// it leaves the NetworkPolicy to the reaper.
const removeWait = 30 * time.Second

// waitPodsGone waits until no pod of the sandbox is left.
func (b *Backend) waitPodsGone(ctx context.Context, name string, limit time.Duration) (bool, error) {
	deadline := time.Now().Add(limit)
	for {
		pods, err := b.sandboxPods(ctx, name)
		if err != nil {
			return false, err
		}
		if len(pods) == 0 {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// apiError words an API failure for users: one line, with what to do.
func (b *Backend) apiError(what string, err error) error {
	switch {
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s: the cluster refused our credentials (401 Unauthorized): check the kubeconfig's user and token: %w", what, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s in namespace %s: forbidden (403): the kubeconfig's user needs the role in docs/kubernetes.md: %w", what, b.ns, err)
	case apierrors.IsNotFound(err) && what == "create pod":
		return fmt.Errorf("%s: namespace %s or its service account does not exist: %w", what, b.ns, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

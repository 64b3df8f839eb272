package kubernetes

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func mustProfile(t testing.TB, name string) Profile {
	t.Helper()
	p, err := LookupProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPodSpecPerProfile creates a sandbox per profile and reads back the
// pod the API server stored (after its defaulting, validation and
// admission: RuntimeClass admission refuses an unknown class).
func TestPodSpecPerProfile(t *testing.T) {
	ctx := context.Background()
	cs := admin(t)
	if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	b := backend(t, Options{RuntimeClass: "gvisor"})
	for _, tc := range []struct {
		profile  string
		ro, root bool
		caps     []corev1.Capability
		mem, cpu string
	}{
		{"restrictive", true, false, nil, "512Mi", "500m"},
		{"moderate", false, true, []corev1.Capability{"CHOWN", "SETUID", "SETGID", "DAC_OVERRIDE", "FOWNER", "KILL"}, "2Gi", "1"},
		{"permissive", false, true, nil, "", ""},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			name := "p-" + tc.profile
			s, err := b.Create(ctx, &Request{Name: name, Image: "alpine:3.20", Profile: mustProfile(t, tc.profile), TTL: time.Hour, Env: []string{"A=b c"}})
			if err != nil {
				t.Fatal(err)
			}
			if s.Name != name || s.Pod != PodName(name) || s.Profile != tc.profile {
				t.Fatalf("sandbox = %+v", s)
			}
			pod, err := cs.CoreV1().Pods(b.Namespace()).Get(ctx, PodName(name), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if pod.Labels[SandboxLabel] != name || pod.Labels[ManagedLabel] != ManagedValue {
				t.Errorf("labels = %v", pod.Labels)
			}
			if exp, ok := expiresAt(pod.Annotations); !ok || time.Until(exp) < 59*time.Minute || pod.Annotations[ImageAnnotation] != "alpine:3.20" {
				t.Errorf("annotations = %v", pod.Annotations)
			}
			ps := pod.Spec
			if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
				t.Error("service account token is mounted")
			}
			if ps.HostUsers == nil || *ps.HostUsers {
				t.Errorf("hostUsers = %v, want false (the API server dropped it? UserNamespacesSupport)", ps.HostUsers)
			}
			if !s.UserNamespace {
				t.Error("Sandbox.UserNamespace is false")
			}
			if ps.HostNetwork || ps.HostPID || ps.HostIPC {
				t.Error("a host namespace is shared")
			}
			if ps.RuntimeClassName == nil || *ps.RuntimeClassName != "gvisor" {
				t.Errorf("runtimeClassName = %v", ps.RuntimeClassName)
			}
			if ps.SecurityContext.SeccompProfile == nil || ps.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Error("pod seccomp is not RuntimeDefault")
			}
			if len(ps.Containers) != 1 {
				t.Fatalf("%d containers", len(ps.Containers))
			}
			c := ps.Containers[0]
			sc := c.SecurityContext
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Privileged == nil || *sc.Privileged {
				t.Error("privilege escalation or privileged allowed")
			}
			if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("drop = %v", sc.Capabilities.Drop)
			}
			if tc.caps != nil && !slices.Equal(sc.Capabilities.Add, tc.caps) {
				t.Errorf("add = %v, want %v", sc.Capabilities.Add, tc.caps)
			}
			if tc.profile == "restrictive" && len(sc.Capabilities.Add) != 0 {
				t.Errorf("restrictive adds %v", sc.Capabilities.Add)
			}
			if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Error("container seccomp is not RuntimeDefault")
			}
			if got := sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem; got != tc.ro {
				t.Errorf("readOnlyRootFilesystem = %v", got)
			}
			nonRoot := ps.SecurityContext.RunAsNonRoot != nil && *ps.SecurityContext.RunAsNonRoot
			if nonRoot == tc.root {
				t.Errorf("runAsNonRoot = %v", nonRoot)
			}
			if nonRoot && (ps.SecurityContext.RunAsUser == nil || *ps.SecurityContext.RunAsUser == 0) {
				t.Error("runAsNonRoot without a non-zero runAsUser")
			}
			if tc.ro && (len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/tmp" || ps.Volumes[0].EmptyDir == nil) {
				t.Errorf("read-only root without a /tmp emptyDir: %v", c.VolumeMounts)
			}
			checkQty := func(res corev1.ResourceName, want string) {
				got, ok := c.Resources.Limits[res]
				if want == "" {
					if ok {
						t.Errorf("%s limit %s, want none", res, got.String())
					}
					return
				}
				if !ok || got.Cmp(resource.MustParse(want)) != 0 {
					t.Errorf("%s limit = %s, want %s", res, got.String(), want)
				}
			}
			checkQty(corev1.ResourceMemory, tc.mem)
			checkQty(corev1.ResourceCPU, tc.cpu)
			if len(c.Env) != 1 || c.Env[0].Name != "A" || c.Env[0].Value != "b c" {
				t.Errorf("env = %v", c.Env)
			}
			if c.Image != "alpine:3.20" || !slices.Equal(c.Command, []string{"sleep", "infinity"}) || ps.RestartPolicy != corev1.RestartPolicyNever {
				t.Errorf("image %q command %v restart %s", c.Image, c.Command, ps.RestartPolicy)
			}
		})
	}
}

// TestLimitsOverride: a request's memory and CPU win over the profile's.
func TestLimitsOverride(t *testing.T) {
	b := backend(t, Options{NoUserNamespace: true})
	ctx := context.Background()
	if _, err := b.Create(ctx, &Request{Name: "lim", Image: "busybox", Profile: mustProfile(t, "moderate"), MemoryMB: 300, CPUPercent: 150}); err != nil {
		t.Fatal(err)
	}
	pod, err := admin(t).CoreV1().Pods(b.Namespace()).Get(ctx, PodName("lim"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l := pod.Spec.Containers[0].Resources.Limits
	if l.Memory().Cmp(resource.MustParse("300Mi")) != 0 || l.Cpu().Cmp(resource.MustParse("1500m")) != 0 {
		t.Errorf("limits = %v", l)
	}
	if pod.Spec.HostUsers != nil {
		t.Errorf("NoUserNamespace: hostUsers = %v", *pod.Spec.HostUsers)
	}
}

// TestNetworkPolicyShapes checks the stored NetworkPolicy of each network.
func TestNetworkPolicyShapes(t *testing.T) {
	b := backend(t, Options{EgressImage: "agentkernel.test/egress:1"})
	ctx := context.Background()
	cs := admin(t)
	net, cidrs, domains, err := ParseNetwork("10.0.0.0/8, 192.0.2.7")
	if err != nil || domains != nil {
		t.Fatal(err, domains)
	}
	for _, tc := range []struct {
		name    string
		net     Network
		cidrs   []string
		egress  int // rules
		targets []string
	}{
		{"none", NetworkNone, nil, 0, nil},
		{"full", NetworkFull, nil, 1, nil},
		{"cidrs", net, cidrs, 1, []string{"10.0.0.0/8", "192.0.2.7/32"}},
		// The pod's own rules and proxy enforce a domain list.
		{"proxy", NetworkProxy, nil, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Request{Name: "n-" + tc.name, Image: "busybox", Profile: mustProfile(t, "moderate"), Network: tc.net, AllowCIDRs: tc.cidrs}
			if tc.net == NetworkProxy {
				r.AllowDomains = []string{"example.com"}
			}
			if _, err := b.Create(ctx, r); err != nil {
				t.Fatal(err)
			}
			np, err := cs.NetworkingV1().NetworkPolicies(b.Namespace()).Get(ctx, PolicyName("n-"+tc.name), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s := np.Spec
			if !slices.Equal(s.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
				t.Errorf("policyTypes = %v", s.PolicyTypes)
			}
			if len(s.Ingress) != 0 {
				t.Errorf("ingress rules: %v", s.Ingress)
			}
			if s.PodSelector.MatchLabels[SandboxLabel] != "n-"+tc.name || s.PodSelector.MatchLabels[ManagedLabel] != ManagedValue || len(s.PodSelector.MatchExpressions) != 0 {
				t.Errorf("selector = %v", s.PodSelector)
			}
			if len(s.Egress) != tc.egress {
				t.Fatalf("egress = %v", s.Egress)
			}
			if tc.name == "full" || tc.name == "proxy" {
				// Every pod, every address but link-local ones and the
				// metadata endpoints, on every port.
				e := s.Egress[0]
				if len(e.Ports) != 0 || len(e.To) != 3 || e.To[0].NamespaceSelector == nil || len(e.To[0].NamespaceSelector.MatchLabels)+len(e.To[0].NamespaceSelector.MatchExpressions) != 0 || e.To[0].PodSelector != nil ||
					e.To[1].IPBlock == nil || e.To[1].IPBlock.CIDR != "0.0.0.0/0" || e.To[2].IPBlock == nil || e.To[2].IPBlock.CIDR != "::/0" {
					t.Fatalf("full egress: %+v", e)
				}
				except := append(append([]string(nil), e.To[1].IPBlock.Except...), e.To[2].IPBlock.Except...)
				for _, want := range []string{"169.254.0.0/16", "fe80::/10", "100.100.100.200/32", "168.63.129.16/32", "fd00:ec2::254/128"} {
					if !slices.Contains(except, want) {
						t.Errorf("full egress does not except %s: %v", want, except)
					}
				}
				return
			}
			var got []string
			for _, e := range s.Egress {
				for _, p := range e.To {
					if p.IPBlock == nil || p.PodSelector != nil || p.NamespaceSelector != nil {
						t.Errorf("peer %v", p)
						continue
					}
					got = append(got, p.IPBlock.CIDR)
				}
			}
			if tc.targets != nil && !slices.Equal(got, tc.targets) {
				t.Errorf("egress to %v, want %v", got, tc.targets)
			}
		})
	}
	// Names make the list the egress proxy's.
	if n, c, d, err := ParseNetwork("10.0.0.0/8,GitHub.com,*.pypi.org"); err != nil || n != NetworkProxy || !slices.Equal(c, []string{"10.0.0.0/8"}) || !slices.Equal(d, []string{"github.com", "*.pypi.org"}) {
		t.Errorf("ParseNetwork with names: %v %v %v %v", n, c, d, err)
	}
	for _, bad := range []string{"10.0.0.0/33", "fe80::1%eth0", "a b", "exa$mple.com", "*.", "example.com.", ","} {
		if _, _, _, err := ParseNetwork(bad); err == nil {
			t.Errorf("ParseNetwork(%q) accepted", bad)
		}
	}
}

// TestCreateListRemoveLeavesNothing: sandboxes come and go without
// leftovers; a taken name and an unknown one are errors.
func TestCreateListRemoveLeavesNothing(t *testing.T) {
	b := backend(t, Options{})
	ctx := context.Background()
	names := []string{"a1", "b2", "c3"}
	for _, n := range names {
		if _, err := b.Create(ctx, &Request{Name: n, Image: "busybox", Profile: mustProfile(t, "restrictive")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Create(ctx, &Request{Name: "b2", Image: "busybox", Profile: mustProfile(t, "restrictive")}); !errors.Is(err, ErrExists) {
		t.Fatalf("second create of b2: %v", err)
	}
	list, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range list {
		got = append(got, s.Name)
		if s.Phase != corev1.PodPending {
			t.Errorf("%s is %s (no kubelet here: Pending)", s.Name, s.Phase)
		}
	}
	if !slices.Equal(got, names) {
		t.Fatalf("list = %v", got)
	}
	if p, n := managedObjects(t, b.Namespace()); p != 3 || n != 3 {
		t.Fatalf("%d pods, %d policies", p, n)
	}
	for _, n := range names {
		if err := b.Remove(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Remove(ctx, "a1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second remove: %v", err)
	}
	if _, err := b.Get(ctx, "a1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get removed: %v", err)
	}
	if p, n := managedObjects(t, b.Namespace()); p != 0 || n != 0 {
		t.Fatalf("left behind: %d pods, %d policies", p, n)
	}
}

// TestOthersObjectsUntouched: a pod without our label, in the same
// namespace and with a sandbox label, is never listed, reaped or removed.
func TestOthersObjectsUntouched(t *testing.T) {
	b := backend(t, Options{})
	ctx := context.Background()
	cs := admin(t)
	foreign := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Labels: map[string]string{SandboxLabel: "theirs"},
		Annotations: map[string]string{ExpiresAnnotation: "2000-01-01T00:00:00Z"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := cs.CoreV1().Pods(b.Namespace()).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if l, err := b.List(ctx); err != nil || len(l) != 0 {
		t.Fatalf("list = %v, %v", l, err)
	}
	if _, err := b.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(ctx, "theirs"); !errors.Is(err, ErrNotFound) {
		t.Errorf("remove theirs: %v", err)
	}
	if _, err := cs.CoreV1().Pods(b.Namespace()).Get(ctx, "theirs", metav1.GetOptions{}); err != nil {
		t.Fatalf("their pod is gone: %v", err)
	}
}

// TestTTLReap moves the backend's clock past a TTL.
func TestTTLReap(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	b := backend(t, Options{Now: func() time.Time { return time.Unix(0, now.Load()) }})
	ctx := context.Background()
	p := mustProfile(t, "moderate")
	for _, r := range []*Request{
		{Name: "short", Image: "busybox", Profile: p, TTL: time.Minute},
		{Name: "long", Image: "busybox", Profile: p, TTL: time.Hour},
		{Name: "forever", Image: "busybox", Profile: p},
		{Name: "lost", Image: "busybox", Profile: p},
	} {
		if _, err := b.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := b.Reap(ctx); err != nil || len(r.Expired)+len(r.Orphans) != 0 {
		t.Fatalf("reap before any TTL: %+v %v", r, err)
	}
	// "lost"'s pod disappears (evicted, deleted by hand): its policy is
	// an orphan, deleted once older than the grace.
	if err := admin(t).CoreV1().Pods(b.Namespace()).Delete(ctx, PodName("lost"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	now.Add(int64(3 * time.Minute))
	r, err := b.Reap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Expired, []string{"short"}) || !slices.Equal(r.Orphans, []string{PolicyName("lost")}) {
		t.Fatalf("reaped %+v", r)
	}
	list, _ := b.List(ctx)
	var left []string
	for _, s := range list {
		left = append(left, s.Name)
	}
	if !slices.Equal(left, []string{"forever", "long"}) {
		t.Fatalf("left %v", left)
	}
	if p, n := managedObjects(t, b.Namespace()); p != 2 || n != 2 {
		t.Fatalf("%d pods, %d policies after reap", p, n)
	}
	now.Add(int64(2 * time.Hour))
	if r, err := b.Reap(ctx); err != nil || !slices.Equal(r.Expired, []string{"long"}) {
		t.Fatalf("second reap %+v %v", r, err)
	}
}

// TestPoolRefillAdopt fills a pool, adopts from it (also concurrently),
// and refills it.
func TestPoolRefillAdopt(t *testing.T) {
	b := backend(t, Options{})
	ctx := context.Background()
	cs := admin(t)
	p := &Pool{Name: "py", Image: "python:3.12-alpine", Profile: mustProfile(t, "restrictive"), Size: 3}
	if n, err := b.Fill(ctx, p); err != nil || n != 3 {
		t.Fatalf("fill: %d %v", n, err)
	}
	if n, err := b.Fill(ctx, p); err != nil || n != 0 {
		t.Fatalf("refill of a full pool: %d %v", n, err)
	}
	// The waiting pods have no network: the pool's policy selects them.
	np, err := cs.NetworkingV1().NetworkPolicies(b.Namespace()).Get(ctx, poolPolicyName("py"), metav1.GetOptions{})
	if err != nil || len(np.Spec.Egress) != 0 || np.Spec.PodSelector.MatchLabels[PoolLabel] != "py" {
		t.Fatalf("pool policy %v %v", np, err)
	}
	if l, _ := b.List(ctx); len(l) != 0 {
		t.Fatalf("waiting pods listed as sandboxes: %v", l)
	}
	s, adopted, err := b.CreateFromPool(ctx, p, &Request{Name: "w1", Image: p.Image, Profile: p.Profile, TTL: time.Minute})
	if err != nil || !adopted {
		t.Fatalf("adopt: %v %v", adopted, err)
	}
	pod, err := cs.CoreV1().Pods(b.Namespace()).Get(ctx, s.Pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Labels[PoolLabel] != "" || pod.Labels[SandboxLabel] != "w1" || !strings.HasPrefix(pod.Name, "agentkernel-pool-py-") {
		t.Errorf("adopted pod %s labels %v", pod.Name, pod.Labels)
	}
	if _, ok := expiresAt(pod.Annotations); !ok {
		t.Error("adopted pod has no expiry")
	}
	if _, err := cs.NetworkingV1().NetworkPolicies(b.Namespace()).Get(ctx, PolicyName("w1"), metav1.GetOptions{}); err != nil {
		t.Errorf("adopted sandbox has no policy: %v", err)
	}
	if n, _ := b.Waiting(ctx, "py"); n != 2 {
		t.Errorf("waiting = %d", n)
	}
	// A request the pool does not fit gets a pod of its own.
	if _, adopted, err := b.CreateFromPool(ctx, p, &Request{Name: "w2", Image: "other", Profile: p.Profile}); err != nil || adopted {
		t.Fatalf("mismatched image: adopted %v %v", adopted, err)
	}
	if _, adopted, err := b.CreateFromPool(ctx, p, &Request{Name: "w3", Image: p.Image, Profile: p.Profile, MemoryMB: 64}); err != nil || adopted {
		t.Fatalf("other limits: adopted %v %v", adopted, err)
	}
	// Eight adopters race for two waiting pods: each pod goes to one.
	var wg sync.WaitGroup
	var took atomic.Int64
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, adopted, err := b.CreateFromPool(ctx, p, &Request{Name: "r" + string(rune('a'+i)), Image: p.Image, Profile: p.Profile})
			if err != nil {
				errs <- err
			}
			if adopted {
				took.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if took.Load() != 2 {
		t.Errorf("%d adoptions from 2 waiting pods", took.Load())
	}
	list, _ := b.List(ctx)
	if len(list) != 11 {
		t.Errorf("%d sandboxes, want 11", len(list))
	}
	if n, err := b.Fill(ctx, p); err != nil || n != 3 {
		t.Fatalf("refill: %d %v", n, err)
	}
	if err := b.Drain(ctx, "py"); err != nil {
		t.Fatal(err)
	}
	if n, _ := b.Waiting(ctx, "py"); n != 0 {
		t.Errorf("drained pool has %d", n)
	}
}

// TestHostileNames: names that are not DNS labels are refused before
// any request reaches the API server.
func TestHostileNames(t *testing.T) {
	l := lab(t)
	ns := namespace(t)
	var calls atomic.Int64
	b, err := NewForConfig(countingConfig(restConfig(l, l.AdminToken), &calls), Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, n := range []string{"", "A", "a_b", "../x", "a/b", "a b", "-a", "a-", "a.b", "x;rm -rf /", "é", "a\x00b", "sandbox\n", strings.Repeat("a", MaxNameLen+1), "kube-system/x"} {
		if _, err := b.Create(ctx, &Request{Name: n, Image: "busybox", Profile: mustProfile(t, "moderate")}); err == nil {
			t.Errorf("Create(%q) accepted", n)
		}
		if err := b.Remove(ctx, n); err == nil {
			t.Errorf("Remove(%q) accepted", n)
		}
		if _, err := b.Get(ctx, n); err == nil {
			t.Errorf("Get(%q) accepted", n)
		}
	}
	for _, img := range []string{"", "a b", "x\n", strings.Repeat("x", 600)} {
		if _, err := b.Create(ctx, &Request{Name: "ok", Image: img, Profile: mustProfile(t, "moderate")}); err == nil {
			t.Errorf("image %q accepted", img)
		}
	}
	if _, err := b.Create(ctx, &Request{Name: "ok", Image: "busybox", Profile: mustProfile(t, "moderate"), Env: []string{"NOEQUALS"}}); err == nil {
		t.Error("env without = accepted")
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d API requests for refused input", n)
	}
	if _, err := b.Create(ctx, &Request{Name: strings.Repeat("a", MaxNameLen), Image: "busybox", Profile: mustProfile(t, "moderate")}); err != nil {
		t.Fatalf("longest name: %v", err)
	}
	for _, o := range []Options{{Namespace: "Bad"}, {Namespace: "a/b"}, {Namespace: "ok", RuntimeClass: "x y"}} {
		if _, err := NewForConfig(restConfig(l, l.AdminToken), o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
}

// TestCredentials: a wrong token and a user without a role get clear,
// distinct errors, and make nothing.
func TestCredentials(t *testing.T) {
	l := lab(t)
	ns := namespace(t)
	ctx := context.Background()
	r := &Request{Name: "c", Image: "busybox", Profile: mustProfile(t, "moderate")}
	bad, err := NewForConfig(restConfig(l, "not-a-token"), Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.Create(ctx, r)
	if err == nil || !strings.Contains(err.Error(), "401 Unauthorized") || !strings.Contains(err.Error(), "check the kubeconfig") {
		t.Errorf("wrong token: %v", err)
	}
	if _, err := bad.List(ctx); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("wrong token list: %v", err)
	}
	nobody, err := NewForConfig(restConfig(l, l.UserToken), Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	_, err = nobody.Create(ctx, r)
	if err == nil || !strings.Contains(err.Error(), "forbidden (403)") || !strings.Contains(err.Error(), "docs/kubernetes.md") {
		t.Errorf("no role: %v", err)
	}
	if p, n := managedObjects(t, ns); p+n != 0 {
		t.Errorf("refused users made %d pods, %d policies", p, n)
	}
}

// TestCRDReconcile installs the CRDs and reconciles AgentSandbox and
// AgentSandboxPool objects: create, status, pool adoption, TTL, deletion.
func TestCRDReconcile(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	b := backend(t, Options{Now: func() time.Time { return time.Unix(0, now.Load()) }})
	ctx := context.Background()
	if err := b.InstallCRDs(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.InstallCRDs(ctx); err != nil {
		t.Fatalf("second install: %v", err)
	}
	sbs := b.dyn.Resource(SandboxResource).Namespace(b.Namespace())
	mk := func(name string, spec map[string]any) {
		t.Helper()
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "agentkernel.io/v1alpha1", "kind": "AgentSandbox", "metadata": map[string]any{"name": name}, "spec": spec}}
		if _, err := sbs.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pool := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "agentkernel.io/v1alpha1", "kind": "AgentSandboxPool", "metadata": map[string]any{"name": "warm"},
		"spec": map[string]any{"image": "node:22", "securityProfile": "moderate", "size": int64(1)}}}
	if _, err := b.dyn.Resource(PoolResource).Namespace(b.Namespace()).Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The schema refuses a profile that does not exist.
	bad := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "agentkernel.io/v1alpha1", "kind": "AgentSandbox", "metadata": map[string]any{"name": "bad"}, "spec": map[string]any{"image": "x", "securityProfile": "root"}}}
	if _, err := sbs.Create(ctx, bad, metav1.CreateOptions{}); err == nil {
		t.Error("schema accepted securityProfile root")
	}
	mk("one", map[string]any{"image": "alpine:3.20", "securityProfile": "restrictive", "resources": map[string]any{"memory": "256Mi", "cpu": "250m"}, "network": "none", "ttl": "10m"})
	mk("two", map[string]any{"image": "node:22", "securityProfile": "moderate", "pool": "warm"})
	mk("a.b", map[string]any{"image": "alpine"})                          // a valid object name, not a DNS label
	mk("net", map[string]any{"image": "alpine", "network": "github.com"}) // names need the egress proxy's image
	rc, err := b.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rc.Created)
	if !slices.Equal(rc.Created, []string{"one", "two"}) || len(rc.Failed) != 2 || rc.Filled != 1 {
		t.Fatalf("reconcile: %+v", rc)
	}
	status := func(name string) map[string]any {
		u, err := sbs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s, _, _ := unstructured.NestedMap(u.Object, "status")
		return s
	}
	st := status("one")
	if st["phase"] != "Pending" || st["podName"] != PodName("one") || st["startedAt"] == nil {
		t.Errorf("status of one: %v", st)
	}
	if st := status("a.b"); st["phase"] != "Failed" || !strings.Contains(st["message"].(string), "DNS label") {
		t.Errorf("status of a.b: %v", st)
	}
	if st := status("net"); st["phase"] != "Failed" || !strings.Contains(st["message"].(string), "egress_image") {
		t.Errorf("status of net: %v", st)
	}
	cs := admin(t)
	pod, err := cs.CoreV1().Pods(b.Namespace()).Get(ctx, PodName("one"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lim := pod.Spec.Containers[0].Resources.Limits
	if pod.Labels[OwnerLabel] != ownerKind || len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].Name != "one" ||
		lim.Memory().Cmp(resource.MustParse("256Mi")) != 0 || lim.Cpu().Cmp(resource.MustParse("250m")) != 0 {
		t.Errorf("pod of one: labels %v owners %v limits %v", pod.Labels, pod.OwnerReferences, lim)
	}
	// "two" adopted the pool's waiting pod; the next pass refills the pool.
	if st := status("two"); !strings.HasPrefix(st["podName"].(string), "agentkernel-pool-warm-") {
		t.Errorf("two did not adopt: %v", st)
	}
	rc, err = b.Reconcile(ctx)
	if err != nil || len(rc.Created) != 0 || rc.Filled != 1 {
		t.Fatalf("second pass: %+v %v", rc, err)
	}
	// The sandbox CLI's Reap leaves an object's sandbox to the reconciler.
	now.Add(int64(11 * time.Minute))
	if r, err := b.Reap(ctx); err != nil || len(r.Expired) != 0 {
		t.Fatalf("reap took an owned sandbox: %+v %v", r, err)
	}
	rc, err = b.Reconcile(ctx)
	if err != nil || !slices.Equal(rc.Expired, []string{"one"}) {
		t.Fatalf("ttl pass: %+v %v", rc, err)
	}
	if st := status("one"); st["phase"] != "Expired" {
		t.Errorf("status of expired one: %v", st)
	}
	if _, err := b.Get(ctx, "one"); !errors.Is(err, ErrNotFound) {
		t.Errorf("expired sandbox still there: %v", err)
	}
	// Deleting the object removes its sandbox (no garbage collector runs
	// here: the reconciler does it).
	if err := sbs.Delete(ctx, "two", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err = b.Reconcile(ctx)
	if err != nil || !slices.Equal(rc.Removed, []string{"two"}) {
		t.Fatalf("delete pass: %+v %v", rc, err)
	}
	if _, err := b.Get(ctx, "two"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted object's sandbox still there: %v", err)
	}
	// A sandbox the CLI made is not taken over by an object of its name.
	if _, err := b.Create(ctx, &Request{Name: "mine", Image: "alpine", Profile: mustProfile(t, "moderate")}); err != nil {
		t.Fatal(err)
	}
	mk("mine", map[string]any{"image": "alpine"})
	if rc, err := b.Reconcile(ctx); err != nil || len(rc.Failed) != 3 {
		t.Fatalf("name clash: %+v %v", rc, err)
	}
	if st := status("mine"); st["phase"] != "Failed" {
		t.Errorf("status of mine: %v", st)
	}
	if s, err := b.Get(ctx, "mine"); err != nil || s.Owner != "" {
		t.Errorf("mine: %+v %v", s, err)
	}
}

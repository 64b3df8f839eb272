package kubernetes

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/kubeegress"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Network is a sandbox's network as a NetworkPolicy can say it.
type Network string

const (
	// NetworkNone: no ingress, no egress (not even DNS).
	NetworkNone Network = "none"
	// NetworkCIDRs: egress only to Request.AllowCIDRs. A NetworkPolicy
	// matches addresses, never names: a domain allow-list cannot be
	// expressed and is refused (ParseNetwork).
	NetworkCIDRs Network = "cidrs"
	// NetworkFull: egress anywhere, no ingress.
	NetworkFull Network = "full"
	// NetworkProxy: egress only through the pod's egress proxy (package
	// kubeegress), which enforces Request.AllowDomains (and AllowCIDRs)
	// or, with BlockDomains only, refuses those names: a domain list,
	// which a NetworkPolicy cannot say. Needs Options.EgressImage.
	NetworkProxy Network = "proxy"
)

// Profile is what a security profile means for a pod.
type Profile struct {
	Name string
	// ReadOnlyRoot: readOnlyRootFilesystem, with an emptyDir on /tmp.
	ReadOnlyRoot bool
	// NonRoot: runAsNonRoot with NonRootUID (the image's user is not
	// trusted to be non-root).
	NonRoot bool
	// Capabilities added back after dropping ALL, without "CAP_".
	Capabilities []string
	Network      Network
	MemoryMB     int64
	CPUPercent   int64 // of one core
}

// NonRootUID is the user (and group) of a NonRoot profile's container:
// 65532, distroless's "nonroot".
const NonRootUID = 65532

// Profiles are the kubernetes meaning of agentkernel's profiles (package
// policy's table): the same network, root filesystem and limits; the
// same capabilities after drop ALL; restrictive also runs as a non-root
// user. Every profile gets no privilege escalation, seccomp
// RuntimeDefault, no service account token, no host namespaces and, where
// the cluster supports it, a user namespace (hostUsers: false).
func Profiles() []Profile {
	return []Profile{
		{Name: "permissive", Network: NetworkFull,
			Capabilities: []string{"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID", "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE"}},
		{Name: "moderate", Network: NetworkFull,
			Capabilities: []string{"CHOWN", "SETUID", "SETGID", "DAC_OVERRIDE", "FOWNER", "KILL"},
			MemoryMB:     2048, CPUPercent: 100},
		{Name: "restrictive", Network: NetworkNone, ReadOnlyRoot: true, NonRoot: true,
			Capabilities: []string{}, MemoryMB: 512, CPUPercent: 50},
	}
}

// LookupProfile returns the named profile; "" is moderate, the default.
func LookupProfile(name string) (Profile, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	if n == "" {
		n = "moderate"
	}
	for _, p := range Profiles() {
		if p.Name == n {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("unknown profile %q: use restrictive, moderate or permissive", name)
}

// Request is one sandbox to create.
type Request struct {
	Name    string
	Image   string // as given: the cluster pulls it
	Profile Profile
	// Network and AllowCIDRs override the profile's network when Network
	// is set.
	Network    Network
	AllowCIDRs []string
	// AllowDomains and BlockDomains are a NetworkProxy sandbox's domain
	// patterns ("example.com", "*.example.com"): with AllowDomains the
	// sandbox reaches only those names (and AllowCIDRs); with
	// BlockDomains only, every name but those.
	AllowDomains []string
	BlockDomains []string
	// MemoryMB and CPUPercent override the profile's limits when > 0.
	MemoryMB   int64
	CPUPercent int64
	// TTL > 0 sets ExpiresAnnotation to Now+TTL; the reaper deletes the
	// sandbox after that.
	TTL time.Duration
	Env []string // KEY=VALUE
	// Workdir is the container's working directory, where exec'd
	// commands start ("": the image's).
	Workdir string
	// Workspace gives the pod an empty, writable /workspace (an
	// emptyDir): the directory a profile's project lives in elsewhere,
	// whose files do not reach the cluster.
	Workspace bool
}

// ParseNetwork reads a --network value: none, full, or a comma-separated
// allow-list of address ranges (CIDRs or single addresses) and domain
// patterns (example.com, *.example.com). Ranges alone become a
// NetworkPolicy (NetworkCIDRs); a list with a name goes through the
// pod's egress proxy (NetworkProxy).
func ParseNetwork(s string) (Network, []string, []string, error) {
	switch strings.TrimSpace(s) {
	case "none", "off":
		return NetworkNone, nil, nil, nil
	case "full", "on":
		return NetworkFull, nil, nil, nil
	case "":
		return "", nil, nil, nil
	}
	var cidrs, domains []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if c, err := parseCIDR(f); err == nil {
			cidrs = append(cidrs, c)
			continue
		}
		if err := config.ValidateDomainPattern(f); err != nil {
			return "", nil, nil, fmt.Errorf("network %q is not an address range or a domain name: %w (use none, full, or a list of address ranges and names such as 10.0.0.0/8,github.com,*.pypi.org)", f, err)
		}
		domains = append(domains, strings.ToLower(f))
	}
	if len(domains) > 0 {
		return NetworkProxy, cidrs, domains, nil
	}
	return NetworkCIDRs, cidrs, nil, nil
}

func parseCIDR(s string) (string, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked().String(), nil
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return netip.PrefixFrom(a, a.BitLen()).String(), nil
	}
	return "", fmt.Errorf("network %q is not an address range (use an address or a CIDR such as 10.0.0.0/8 or 192.0.2.7)", s)
}

// network is the request's effective network.
func (r *Request) network() (Network, []string) {
	if r.Network != "" {
		return r.Network, r.AllowCIDRs
	}
	return r.Profile.Network, nil
}

// Check refuses a request that cannot become a pod, before any API call.
func (r *Request) Check() error {
	if err := ValidName(r.Name); err != nil {
		return err
	}
	if err := checkImage(r.Image); err != nil {
		return err
	}
	n, cidrs := r.network()
	switch n {
	case NetworkNone, NetworkFull:
	case NetworkCIDRs:
		if len(cidrs) == 0 {
			return fmt.Errorf("network: an allow-list needs at least one address range")
		}
		for _, c := range cidrs {
			if _, err := parseCIDR(c); err != nil {
				return err
			}
		}
	case NetworkProxy:
		if len(r.AllowDomains) == 0 && len(r.BlockDomains) == 0 {
			return fmt.Errorf("network: an egress proxy needs domains to allow or block")
		}
		if len(r.AllowDomains)+len(r.BlockDomains)+len(cidrs) > 4096 {
			return fmt.Errorf("network: more than 4096 entries")
		}
		for _, c := range cidrs {
			if _, err := parseCIDR(c); err != nil {
				return err
			}
		}
		for _, d := range append(append([]string(nil), r.AllowDomains...), r.BlockDomains...) {
			if err := config.ValidateDomainPattern(d); err != nil {
				return fmt.Errorf("network: %w", err)
			}
		}
	default:
		return fmt.Errorf("unknown network %q: use none, full, or address ranges and names", n)
	}
	if r.Workdir != "" && (!strings.HasPrefix(r.Workdir, "/") || strings.ContainsRune(r.Workdir, 0)) {
		return fmt.Errorf("working directory %q: give an absolute path inside the sandbox", r.Workdir)
	}
	if r.MemoryMB < 0 || r.CPUPercent < 0 || r.TTL < 0 {
		return fmt.Errorf("memory, cpu and ttl must not be negative")
	}
	for _, e := range r.Env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" || strings.ContainsAny(k, "\x00") {
			return fmt.Errorf("environment entry %q is not KEY=VALUE", e)
		}
	}
	return nil
}

// checkImage refuses what cannot be an image reference: empty, spaces,
// control characters, or longer than any registry takes.
func checkImage(ref string) error {
	if ref == "" {
		return fmt.Errorf("an image is required (--image alpine:3.20)")
	}
	if len(ref) > 512 {
		return fmt.Errorf("image reference is %d characters: too long", len(ref))
	}
	for _, c := range ref {
		if c <= ' ' || c == 0x7f {
			return fmt.Errorf("image reference %q contains a space or control character", ref)
		}
	}
	return nil
}

// podOptions are the backend's settings that shape every pod.
type podOptions struct {
	Namespace    string
	RuntimeClass string
	// HostUsers false asks for a user namespace (hostUsers: false).
	NoUserNamespace bool
	ServiceAccount  string
	// EgressImage and EgressResolvers: Options'.
	EgressImage     string
	EgressResolvers []string
}

// sandboxLabels are the labels of a sandbox's pod and the policy's
// selector.
func sandboxLabels(name, profile string) map[string]string {
	return map[string]string{SandboxLabel: name, ManagedLabel: ManagedValue, ProfileLabel: profile}
}

// buildPod makes the pod for r (name, labels and annotations of a
// sandbox); pools use it with a pool's labels instead.
func buildPod(o podOptions, r *Request, now time.Time) *corev1.Pod {
	p := r.Profile
	mem, cpu := p.MemoryMB, p.CPUPercent
	if r.MemoryMB > 0 {
		mem = r.MemoryMB
	}
	if r.CPUPercent > 0 {
		cpu = r.CPUPercent
	}
	net, _ := r.network()
	ann := map[string]string{ImageAnnotation: r.Image, NetworkAnnotation: string(net)}
	if r.TTL > 0 {
		ann[ExpiresAnnotation] = now.Add(r.TTL).UTC().Format(time.RFC3339)
	}
	f, t := false, true
	grace := int64(2)
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: &f,
		Privileged:               &f,
		ReadOnlyRootFilesystem:   &p.ReadOnlyRoot,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		ProcMount:                nil,
	}
	for _, c := range p.Capabilities {
		sc.Capabilities.Add = append(sc.Capabilities.Add, corev1.Capability(c))
	}
	psc := &corev1.PodSecurityContext{
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if p.NonRoot {
		uid := int64(NonRootUID)
		psc.RunAsNonRoot = &t
		psc.RunAsUser = &uid
		psc.RunAsGroup = &uid
		psc.FSGroup = &uid
	}
	c := corev1.Container{
		Name:  "sandbox",
		Image: r.Image,
		// The sandbox idles until commands are exec'd into it.
		Command:         []string{"sleep", "infinity"},
		ImagePullPolicy: corev1.PullIfNotPresent,
		SecurityContext: sc,
		Stdin:           false,
		TTY:             false,
		WorkingDir:      r.Workdir,
	}
	for _, e := range r.Env {
		k, v, _ := strings.Cut(e, "=")
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: v})
	}
	if mem > 0 || cpu > 0 {
		c.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}}
		if mem > 0 {
			q := resource.MustParse(strconv.FormatInt(mem, 10) + "Mi")
			c.Resources.Limits[corev1.ResourceMemory] = q
			c.Resources.Requests[corev1.ResourceMemory] = q
		}
		if cpu > 0 {
			q := resource.MustParse(strconv.FormatInt(cpu*10, 10) + "m")
			c.Resources.Limits[corev1.ResourceCPU] = q
			c.Resources.Requests[corev1.ResourceCPU] = q
		}
	}
	var vols []corev1.Volume
	if p.ReadOnlyRoot {
		size := resource.MustParse("64Mi")
		vols = append(vols, corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &size}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"})
	}
	if r.Workspace {
		vols = append(vols, corev1.Volume{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "workspace", MountPath: "/workspace"})
	}
	var inits []corev1.Container
	if net == NetworkProxy {
		// The sandbox must never be the proxy's user, whose connections
		// leave the pod unfiltered, nor become it: it runs as root (or
		// the profile's non-root user), never as the image says, and
		// without CAP_SETUID and CAP_SETGID. Nor may it forge packets
		// that the rules would take for the proxy's connections (CAP_NET_RAW).
		if !p.NonRoot {
			root := int64(0)
			sc.RunAsUser, sc.RunAsGroup = &root, &root
		}
		var keep []corev1.Capability
		for _, c := range sc.Capabilities.Add {
			if c != "SETUID" && c != "SETGID" && c != "NET_RAW" {
				keep = append(keep, c)
			}
		}
		sc.Capabilities.Add = keep
		inits = egressContainers(o, r)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        PodName(r.Name),
			Namespace:   o.Namespace,
			Labels:      sandboxLabels(r.Name, p.Name),
			Annotations: ann,
		},
		Spec: corev1.PodSpec{
			InitContainers:                inits,
			Containers:                    []corev1.Container{c},
			Volumes:                       vols,
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &f,
			EnableServiceLinks:            &f,
			HostNetwork:                   false,
			HostPID:                       false,
			HostIPC:                       false,
			SecurityContext:               psc,
			TerminationGracePeriodSeconds: &grace,
			ServiceAccountName:            o.ServiceAccount,
		},
	}
	if !o.NoUserNamespace {
		pod.Spec.HostUsers = &f
	}
	if o.RuntimeClass != "" {
		rc := o.RuntimeClass
		pod.Spec.RuntimeClassName = &rc
	}
	return pod
}

// buildPolicy makes the NetworkPolicy named name that selects the pods
// with labels sel: no ingress ever, egress as net says.
func buildPolicy(namespace, name string, sel map[string]string, net Network, cidrs []string, labels map[string]string) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: sel},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			// Ingress empty: nothing may connect to the sandbox.
		},
	}
	switch net {
	case NetworkFull, NetworkProxy:
		// Everywhere but the cloud metadata endpoints and link-local
		// addresses, which agentkernel refuses in every mode (the
		// egress proxy too): every pod of the cluster, and every
		// address outside those ranges. NetworkProxy: the pod's own
		// rules send everything to its egress proxy, which needs the
		// cluster's DNS and the allowed names' addresses.
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: fullEgress()}}
	case NetworkCIDRs:
		var to []networkingv1.NetworkPolicyPeer
		for _, c := range cidrs {
			to = append(to, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
		}
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: to}}
	default: // none: Egress empty, so nothing leaves
	}
	return np
}

// egressContainers are a NetworkProxy pod's init container, which
// writes the rules that send the pod's traffic to the proxy, and the
// proxy itself, a sidecar (an init container that keeps running, so it
// listens before the sandbox's container starts).
func egressContainers(o podOptions, r *Request) []corev1.Container {
	rules := kubeegress.DefaultRules()
	allow := sandbox.Network{Mode: sandbox.NetworkFiltered, AllowDomains: r.AllowDomains, AllowCIDRs: r.AllowCIDRs, BlockDomains: r.BlockDomains}
	if len(r.AllowDomains) == 0 {
		allow.Mode = sandbox.NetworkFull
	}
	settings, _ := json.Marshal(kubeegress.Settings{Network: allow, Resolvers: o.EgressResolvers, TCPPort: rules.TCPPort, DNSPort: rules.DNSPort})
	f, t := false, true
	root, uid := int64(0), int64(kubeegress.UID)
	always := corev1.ContainerRestartPolicyAlways
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	limits := func(cpu, mem string) corev1.ResourceRequirements {
		l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
		return corev1.ResourceRequirements{Limits: l, Requests: l}
	}
	bin := kubeegress.DefaultBinary
	return []corev1.Container{{
		Name:            "egress-init",
		Image:           o.EgressImage,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         append([]string{bin, kubeegress.Command}, rules.Args()...),
		SecurityContext: &corev1.SecurityContext{
			RunAsUser: &root, RunAsGroup: &root, RunAsNonRoot: &f,
			AllowPrivilegeEscalation: &f, Privileged: &f, ReadOnlyRootFilesystem: &t, SeccompProfile: seccomp,
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}},
		},
		Resources: limits("100m", "64Mi"),
	}, {
		Name:            "egress",
		Image:           o.EgressImage,
		ImagePullPolicy: corev1.PullIfNotPresent,
		RestartPolicy:   &always,
		Command:         []string{bin, kubeegress.Command, "serve"},
		Env:             []corev1.EnvVar{{Name: kubeegress.EnvSettings, Value: string(settings)}},
		SecurityContext: &corev1.SecurityContext{
			RunAsUser: &uid, RunAsGroup: &uid, RunAsNonRoot: &t,
			AllowPrivilegeEscalation: &f, Privileged: &f, ReadOnlyRootFilesystem: &t, SeccompProfile: seccomp,
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		StartupProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
				Command: []string{bin, kubeegress.Command, "ready", "--dns-port", strconv.Itoa(int(rules.DNSPort))}}},
			PeriodSeconds: 1, TimeoutSeconds: 2, FailureThreshold: 60,
		},
		Resources: limits("500m", "256Mi"),
	}}
}

// fullEgress are the peers of a full network: all pods (a plugin may
// not count pods' addresses as an ipBlock's), and every address but
// link-local ones and the cloud metadata endpoints.
func fullEgress() []networkingv1.NetworkPolicyPeer {
	except4 := []string{"169.254.0.0/16"}
	except6 := []string{"fe80::/10"}
	for _, a := range sandbox.MetadataAddrs() {
		p := netip.PrefixFrom(a, a.BitLen()).String()
		switch {
		case a.Is4() && !netip.MustParsePrefix("169.254.0.0/16").Contains(a):
			except4 = append(except4, p)
		case a.Is6():
			except6 = append(except6, p)
		}
	}
	return []networkingv1.NetworkPolicyPeer{
		{NamespaceSelector: &metav1.LabelSelector{}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: except4}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: except6}},
	}
}

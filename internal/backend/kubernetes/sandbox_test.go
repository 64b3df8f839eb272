package kubernetes

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/agentkernel/agentkernel/internal/kubeegress"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// RequestFor: what a spec becomes as a pod, and what a pod cannot be,
// refused as sandbox.ErrUnsupported (the API's 501) before anything is
// made.
func TestRequestFor(t *testing.T) {
	base := func() *sandbox.Spec {
		return &sandbox.Spec{Image: "alpine:3.20", Profile: "moderate", Workdir: "/workspace",
			Network:   sandbox.Network{Mode: sandbox.NetworkFull},
			Resources: sandbox.Resources{MemoryMB: 256, CPUPercent: 50},
			Mounts:    []sandbox.Mount{{Kind: sandbox.MountCopyOnWrite, Source: "/home/me/project", Dest: "/workspace"}},
			Env:       []string{"PATH=/usr/bin:/bin", "HOME=/root"}}
	}
	r, err := RequestFor("box", base())
	if err != nil {
		t.Fatal(err)
	}
	if !r.Workspace || r.Workdir != "/workspace" || r.Network != NetworkFull || r.MemoryMB != 256 || r.CPUPercent != 50 || r.Profile.Name != "moderate" || len(r.Env) != 2 {
		t.Errorf("request: %+v", r)
	}
	pod := buildPod(podOptions{Namespace: "ns"}, r, time.Time{})
	c := pod.Spec.Containers[0]
	if c.WorkingDir != "/workspace" || len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/workspace" || pod.Spec.Volumes[0].EmptyDir == nil {
		t.Errorf("pod: workdir %q, mounts %+v, volumes %+v", c.WorkingDir, c.VolumeMounts, pod.Spec.Volumes)
	}
	// Without the project mount, a /workspace working directory would not
	// exist: the image's stays.
	s := base()
	s.Mounts = nil
	if r, err := RequestFor("box", s); err != nil || r.Workspace || r.Workdir != "" {
		t.Errorf("no workspace: %+v %v", r, err)
	}
	s = base()
	s.Network = sandbox.Network{Mode: sandbox.NetworkFiltered, AllowCIDRs: []string{"10.0.0.0/8"}}
	if r, err := RequestFor("box", s); err != nil || r.Network != NetworkCIDRs || !reflect.DeepEqual(r.AllowCIDRs, []string{"10.0.0.0/8"}) {
		t.Errorf("CIDRs: %+v %v", r, err)
	}
	// Domain lists go through the pod's egress proxy.
	s = base()
	s.Network = sandbox.Network{Mode: sandbox.NetworkFiltered, AllowDomains: []string{"example.com"}, AllowCIDRs: []string{"192.0.2.0/24"}, BlockDomains: []string{"bad.example.com"}}
	if r, err := RequestFor("box", s); err != nil || r.Network != NetworkProxy || !reflect.DeepEqual(r.AllowDomains, []string{"example.com"}) ||
		!reflect.DeepEqual(r.BlockDomains, []string{"bad.example.com"}) || !reflect.DeepEqual(r.AllowCIDRs, []string{"192.0.2.0/24"}) {
		t.Errorf("domains: %+v %v", r, err)
	}
	s = base()
	s.Network = sandbox.Network{Mode: sandbox.NetworkFull, BlockDomains: []string{"example.com"}}
	if r, err := RequestFor("box", s); err != nil || r.Network != NetworkProxy || len(r.AllowDomains) != 0 || !reflect.DeepEqual(r.BlockDomains, []string{"example.com"}) {
		t.Errorf("block list: %+v %v", r, err)
	}
	// Without the proxy's image, the backend refuses them before making
	// anything.
	if err := (&RunBackend{B: &Backend{}}).Check(s); !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "egress_image") {
		t.Errorf("no egress image: %v", err)
	}
	if err := (&RunBackend{B: &Backend{opts: Options{EgressImage: "agentkernel:1"}}}).Check(s); err != nil {
		t.Errorf("with an egress image: %v", err)
	}
	for what, mod := range map[string]func(*sandbox.Spec){
		"ports": func(s *sandbox.Spec) { s.Network.Ports = []sandbox.PortMapping{{HostPort: 8080, SandboxPort: 80}} },
		"volume": func(s *sandbox.Spec) {
			s.Mounts = append(s.Mounts, sandbox.Mount{Kind: sandbox.MountBind, Source: "/etc", Dest: "/data"})
		},
		"host image":  func(s *sandbox.Spec) { s.Image = "host" },
		"ssh":         func(s *sandbox.Spec) { s.SSH = &sandbox.SSHAccess{} },
		"secrets":     func(s *sandbox.Spec) { s.SecretBindings = &sandbox.SecretBindings{Bindings: []sandbox.SecretRef{{}}} },
		"udp":         func(s *sandbox.Spec) { s.Network.AllowUDP = []string{"10.0.0.1:53"} },
		"bad profile": nil,
	} {
		s := base()
		if mod == nil {
			s.Profile = "custom"
			if _, err := RequestFor("box", s); err == nil {
				t.Errorf("%s: accepted", what)
			}
			continue
		}
		mod(s)
		if _, err := RequestFor("box", s); !errors.Is(err, sandbox.ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", what, err)
		}
	}
	rb := &RunBackend{}
	s = base()
	s.Keep = true
	if err := rb.Check(s); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("keep: %v", err)
	}
	if err := rb.Check(base()); err != nil {
		t.Errorf("check: %v", err)
	}
}

// execArgs: env and workdir reach the pod as arguments of env(1) and sh,
// never as script text, and what env(1) would read as an option or an
// assignment is refused.
func TestExecArgs(t *testing.T) {
	got, err := execArgs(sandbox.ExecRequest{Args: []string{"sh", "-c", "echo $FOO"}, Env: []string{"FOO=a b;$(x)"}, Workdir: "/tmp/'; rm -rf /"})
	want := []string{"sh", "-c", `cd -- "$0" || exit 126; exec "$@"`, "/tmp/'; rm -rf /", "env", "FOO=a b;$(x)", "sh", "-c", "echo $FOO"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("execArgs = %q, %v", got, err)
	}
	if got, _ := execArgs(sandbox.ExecRequest{Args: []string{"true"}}); !reflect.DeepEqual(got, []string{"true"}) {
		t.Errorf("plain: %q", got)
	}
	for _, req := range []sandbox.ExecRequest{
		{Args: []string{"true"}, Env: []string{"-i=x"}},
		{Args: []string{"true"}, Env: []string{"1A=x"}},
		{Args: []string{"true"}, Env: []string{"NOEQUALS"}},
		{Args: []string{"A=b"}, Env: []string{"X=1"}},
		{Args: []string{"true"}, Workdir: "relative"},
	} {
		if _, err := execArgs(req); err == nil {
			t.Errorf("%+v: accepted", req)
		}
	}
}

func TestParseStat(t *testing.T) {
	fi, err := parseStat("6 81a4 1700000000 /tmp/d/a b.txt")
	if err != nil || fi.Name != "a b.txt" || fi.Size != 6 || fi.Mode != 0o644 || fi.ModTime.Unix() != 1700000000 {
		t.Errorf("file: %+v %v", fi, err)
	}
	fi, err = parseStat("4096 41ed 1700000000 sub")
	if err != nil || !fi.Mode.IsDir() || fi.Mode.Perm() != 0o755 {
		t.Errorf("dir: %+v %v", fi, err)
	}
	if fi, _ := parseStat("3 a1ff 1 l"); fi.Mode&os.ModeSymlink == 0 {
		t.Errorf("link: %+v", fi)
	}
	if _, err := parseStat("garbage"); err == nil || !strings.Contains(err.Error(), "garbage") {
		t.Errorf("garbage: %v", err)
	}
}

// TestEgressPod: a domain list's pod gets the rules' init container (the
// only one with CAP_NET_ADMIN) and the proxy's sidecar (its user, no
// capability, the policy in its environment), and the sandbox's
// container can neither be nor become the proxy's user.
func TestEgressPod(t *testing.T) {
	for _, profile := range []string{"permissive", "moderate", "restrictive"} {
		t.Run(profile, func(t *testing.T) {
			p, err := LookupProfile(profile)
			if err != nil {
				t.Fatal(err)
			}
			r := &Request{Name: "box", Image: "python:3.12", Profile: p, Network: NetworkProxy, AllowDomains: []string{"pypi.org"}, AllowCIDRs: []string{"192.0.2.0/24"}}
			if err := r.Check(); err != nil {
				t.Fatal(err)
			}
			pod := buildPod(podOptions{Namespace: "ns", EgressImage: "registry.example/agentkernel:1", EgressResolvers: []string{"192.0.2.53:53"}}, r, time.Time{})
			if len(pod.Spec.InitContainers) != 2 {
				t.Fatalf("init containers: %+v", pod.Spec.InitContainers)
			}
			ini, px, sb := pod.Spec.InitContainers[0], pod.Spec.InitContainers[1], pod.Spec.Containers[0]
			if ini.Image != "registry.example/agentkernel:1" || px.Image != ini.Image {
				t.Errorf("images %q %q", ini.Image, px.Image)
			}
			if !reflect.DeepEqual(ini.SecurityContext.Capabilities.Add, []corev1.Capability{"NET_ADMIN"}) || *ini.SecurityContext.RunAsUser != 0 || ini.RestartPolicy != nil {
				t.Errorf("rules' container: %+v", ini.SecurityContext)
			}
			if px.RestartPolicy == nil || *px.RestartPolicy != corev1.ContainerRestartPolicyAlways || px.StartupProbe == nil {
				t.Errorf("proxy is not a sidecar with a startup probe: %+v", px)
			}
			if c := px.SecurityContext; len(c.Capabilities.Add) != 0 || *c.RunAsUser != kubeegress.UID || !*c.RunAsNonRoot || *c.AllowPrivilegeEscalation || !*c.ReadOnlyRootFilesystem {
				t.Errorf("proxy's security context: %+v", c)
			}
			var settings kubeegress.Settings
			if len(px.Env) != 1 || px.Env[0].Name != kubeegress.EnvSettings || json.Unmarshal([]byte(px.Env[0].Value), &settings) != nil {
				t.Fatalf("proxy's environment: %+v", px.Env)
			}
			if err := settings.Check(); err != nil || settings.Network.Mode != sandbox.NetworkFiltered ||
				!reflect.DeepEqual(settings.Network.AllowDomains, []string{"pypi.org"}) || !reflect.DeepEqual(settings.Network.AllowCIDRs, []string{"192.0.2.0/24"}) ||
				!reflect.DeepEqual(settings.Resolvers, []string{"192.0.2.53:53"}) {
				t.Errorf("proxy's settings: %+v %v", settings, err)
			}
			uid := sb.SecurityContext.RunAsUser
			if uid == nil {
				uid = pod.Spec.SecurityContext.RunAsUser
			}
			if uid == nil || *uid == kubeegress.UID {
				t.Errorf("sandbox's user: %v", uid)
			}
			for _, c := range sb.SecurityContext.Capabilities.Add {
				if c == "SETUID" || c == "SETGID" || c == "NET_ADMIN" || c == "NET_RAW" {
					t.Errorf("sandbox keeps %s", c)
				}
			}
		})
	}
	// A block-list only: the proxy lets every other name through.
	p, _ := LookupProfile("moderate")
	pod := buildPod(podOptions{EgressImage: "e:1"}, &Request{Name: "b", Image: "alpine", Profile: p, Network: NetworkProxy, BlockDomains: []string{"evil.example"}}, time.Time{})
	var settings kubeegress.Settings
	if err := json.Unmarshal([]byte(pod.Spec.InitContainers[1].Env[0].Value), &settings); err != nil || settings.Network.Mode != sandbox.NetworkFull || !reflect.DeepEqual(settings.Network.BlockDomains, []string{"evil.example"}) {
		t.Errorf("block list settings: %+v %v", settings, err)
	}
	// Other networks: no proxy.
	pod = buildPod(podOptions{EgressImage: "e:1"}, &Request{Name: "b", Image: "alpine", Profile: p, Network: NetworkFull}, time.Time{})
	if len(pod.Spec.InitContainers) != 0 {
		t.Errorf("full network has init containers: %+v", pod.Spec.InitContainers)
	}
}

// TestCheckSidecars: a cluster that drops the proxy's restartPolicy
// (older than 1.29) is told, rather than left with a pod that waits on
// its proxy forever.
func TestCheckSidecars(t *testing.T) {
	p, _ := LookupProfile("moderate")
	pod := buildPod(podOptions{EgressImage: "e:1"}, &Request{Name: "b", Image: "alpine", Profile: p, Network: NetworkProxy, AllowDomains: []string{"example.com"}}, time.Time{})
	if err := checkSidecars(pod); err != nil {
		t.Fatalf("as built: %v", err)
	}
	pod.Spec.InitContainers[1].RestartPolicy = nil
	if err := checkSidecars(pod); !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "1.29") {
		t.Fatalf("without the sidecar's restartPolicy: %v", err)
	}
	if err := checkSidecars(buildPod(podOptions{}, &Request{Name: "b", Image: "alpine", Profile: p, Network: NetworkFull}, time.Time{})); err != nil {
		t.Fatalf("no proxy: %v", err)
	}
}

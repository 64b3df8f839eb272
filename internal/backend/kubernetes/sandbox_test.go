package kubernetes

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

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
	for what, mod := range map[string]func(*sandbox.Spec){
		"domains": func(s *sandbox.Spec) {
			s.Network.Mode, s.Network.AllowDomains = sandbox.NetworkFiltered, []string{"example.com"}
		},
		"block": func(s *sandbox.Spec) { s.Network.BlockDomains = []string{"example.com"} },
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

package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/contract"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

func TestMain(m *testing.M) {
	// The probes re-execute this binary as their children.
	if native.IsInit() {
		os.Exit(native.InitMain())
	}
	os.Exit(m.Run())
}

func TestParseKernelVersion(t *testing.T) {
	for _, c := range []struct {
		in       string
		maj, min int
		ok       bool
	}{
		{"6.18.44-fc-v782", 6, 18, true},
		{"6.1.0-18-amd64", 6, 1, true},
		{"5.4.0", 5, 4, true},
		{"4.19.0-microsoft-standard", 4, 19, true},
		{"5", 0, 0, false},
		{"", 0, 0, false},
		{"v6.1", 0, 0, false},
		{"99999999999999999999.1", 0, 0, false},
	} {
		maj, min, ok := ParseKernelVersion(c.in)
		if maj != c.maj || min != c.min || ok != c.ok {
			t.Errorf("ParseKernelVersion(%q) = %d, %d, %v", c.in, maj, min, ok)
		}
	}
}

func TestUsernsSysctls(t *testing.T) {
	files := func(m map[string]string) func(string) string {
		return func(p string) string { return m[p] }
	}
	const (
		clone = "/proc/sys/kernel/unprivileged_userns_clone"
		max   = "/proc/sys/user/max_user_namespaces"
		aa    = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"
	)
	for _, c := range []struct {
		files map[string]string
		want  UsernsSysctls
		fix   string
	}{
		{map[string]string{max: "0", clone: "1"}, UsernsSysctls{1, 0, -1}, "user.max_user_namespaces=15000"},
		{map[string]string{max: "63000", clone: "0"}, UsernsSysctls{0, 63000, -1}, "kernel.unprivileged_userns_clone=1"},
		{map[string]string{max: "63000", aa: "1"}, UsernsSysctls{-1, 63000, 1}, "kernel.apparmor_restrict_unprivileged_userns=0"},
		{map[string]string{max: "63000", aa: "0"}, UsernsSysctls{-1, 63000, 0}, "CONFIG_USER_NS"},
		{map[string]string{max: "garbage"}, UsernsSysctls{-1, -1, -1}, "CONFIG_USER_NS"},
	} {
		got := ReadUsernsSysctls(files(c.files))
		if got != c.want {
			t.Errorf("%v: %+v, want %+v", c.files, got, c.want)
		}
		if !strings.Contains(got.Fix(), c.fix) {
			t.Errorf("%v: fix %q lacks %q", c.files, got.Fix(), c.fix)
		}
	}
}

func TestDetectContainer(t *testing.T) {
	for _, c := range []struct {
		s    ContainerSigns
		want string
	}{
		{ContainerSigns{PID1Cgroup: "0::/init.scope", PID1Comm: "systemd"}, ""},
		{ContainerSigns{PID1Cgroup: "0::/", PID1Comm: "init"}, ""},
		{ContainerSigns{DockerEnv: true, PID1Cgroup: "0::/", PID1Comm: "sh"}, "docker"},
		{ContainerSigns{ContainerEnv: true, PID1Cgroup: "0::/", PID1Comm: "catatonit"}, "podman"},
		{ContainerSigns{PID1Cgroup: "12:memory:/kubepods/burstable/pod1/abc", PID1Comm: "pause"}, "kubernetes"},
		// A pod with a cgroup namespace of its own: PID 1's cgroup
		// says nothing, its environment does.
		{ContainerSigns{Kubernetes: true, PID1Cgroup: "0::/", PID1Comm: "python3"}, "kubernetes"},
		{ContainerSigns{PID1Cgroup: "0::/system.slice/docker-0123.scope", PID1Comm: "bash"}, "docker"},
		{ContainerSigns{PID1Cgroup: "1:name=systemd:/docker/0123", PID1Comm: "bash"}, "docker"},
		{ContainerSigns{PID1Cgroup: "0::/machine.slice/libpod-0123.scope", PID1Comm: "bash"}, "podman"},
		{ContainerSigns{PID1Cgroup: "0::/", PID1Comm: "tini"}, "tini as PID 1"},
		{ContainerSigns{PID1Cgroup: "0::/", PID1Comm: "bash"}, ""},
	} {
		if got := DetectContainer(c.s); got != c.want {
			t.Errorf("DetectContainer(%+v) = %q, want %q", c.s, got, c.want)
		}
	}
}

func TestFirstLine(t *testing.T) {
	if got := FirstLine("\n  crun version 1.8.1\ncommit: x\n"); got != "crun version 1.8.1" {
		t.Errorf("%q", got)
	}
	if got := FirstLine(strings.Repeat("x", 500)); len(got) != 120 {
		t.Errorf("not cut: %d", len(got))
	}
	if got := FirstLine(" \n\n"); got != "" {
		t.Errorf("%q", got)
	}
}

// TestToolCheck: a tool that answers, one that hangs past the timeout,
// one that fails, and one that is missing.
func TestToolCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, script string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("fakert", `echo "fakert version 9.9"; echo more`)
	write("hangrt", `exec /bin/sleep 30`)
	write("failrt", `echo nope >&2; exit 3`)
	t.Setenv("PATH", dir)
	ctx := context.Background()
	if c := toolCheck(ctx, "fakert", time.Second); c.Status != StatusOK || !strings.HasSuffix(c.Message, ": fakert version 9.9") {
		t.Errorf("answering tool: %+v", c)
	}
	start := time.Now()
	if c := toolCheck(ctx, "hangrt", 200*time.Millisecond); c.Status != StatusInfo || !strings.Contains(c.Message, "no answer") {
		t.Errorf("hanging tool: %+v", c)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("hanging tool held the doctor %s", d)
	}
	if c := toolCheck(ctx, "failrt", time.Second); c.Status != StatusInfo || !strings.Contains(c.Message, "does not answer") {
		t.Errorf("failing tool: %+v", c)
	}
	if c := toolCheck(ctx, "nosuchrt", time.Second); c.Status != StatusInfo || c.Message != "not installed" {
		t.Errorf("missing tool: %+v", c)
	}
}

// TestFinish: the verdict follows the worst finding.
func TestFinish(t *testing.T) {
	r := &Report{Backend: "native"}
	r.finish(nil)
	if r.Isolation != "full" || !r.Healthy || r.Checks[len(r.Checks)-1].Status != StatusOK {
		t.Errorf("full: %+v", r)
	}
	r = &Report{Backend: "native", Rootless: true, Degraded: []string{"cgroups"}}
	r.finish(nil)
	if r.Isolation != "degraded" || !r.Healthy || r.Checks[0].Status != StatusWarning || !strings.Contains(r.Checks[0].Message, "rootless") {
		t.Errorf("degraded: %+v", r)
	}
	r = &Report{Backend: "native", Refused: []string{"cgroups"}, Degraded: []string{"landlock"}}
	r.finish(nil)
	if r.Isolation != "refused" || r.Healthy || r.Checks[0].Status != StatusError {
		t.Errorf("refused: %+v", r)
	}
	r = &Report{Backend: "native"}
	r.finish(map[string]string{"seccomp": "no seccomp", "overlayfs": "no overlay"})
	if r.Isolation != "refused" || r.Healthy || !strings.Contains(r.Why, "no overlay") || !strings.Contains(r.Checks[0].Message, "overlayfs, seccomp") {
		t.Errorf("fatal: %+v", r)
	}
}

// TestRunHere probes this host: every check has a known status, the
// JSON has GET /doctor's shape, and as root on a host with cgroups the
// verdict is full isolation.
func TestRunHere(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	r := Run(context.Background(), Options{DataDir: t.TempDir(), Tools: []string{"sh", "no-such-runtime"}})
	names := map[string]bool{}
	for _, c := range r.Checks {
		names[c.Name] = true
		switch c.Status {
		case StatusOK, StatusWarning, StatusInfo, StatusError:
		default:
			t.Errorf("%s: status %q", c.Name, c.Status)
		}
		if c.Message == "" || c.Enables == "" {
			t.Errorf("%s: no message or no enables: %+v", c.Name, c)
		}
		if c.Status == StatusError && c.Fix == "" {
			t.Errorf("%s: an error without a fix: %+v", c.Name, c)
		}
	}
	for _, n := range []string{"kernel", "user_namespaces", "namespaces", "overlayfs", "idmapped_mounts", "cgroups", "seccomp", "landlock", "network_egress", "kvm", "sh", "no-such-runtime", "gvisor", "container", "backend"} {
		if !names[n] {
			t.Errorf("no %s check", n)
		}
	}
	if r.Checks[len(r.Checks)-1].Name != "backend" {
		t.Errorf("the backend check is not last")
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var shape struct {
		Checks  []map[string]any `json:"checks"`
		Healthy *bool            `json:"healthy"`
	}
	if err := json.Unmarshal(b, &shape); err != nil || shape.Healthy == nil || len(shape.Checks) != len(r.Checks) {
		t.Fatalf("shape: %v %s", err, b)
	}
	var text bytes.Buffer
	r.WriteText(&text)
	if lines := strings.Count(text.String(), "\n"); lines < len(r.Checks)+3 || !strings.Contains(text.String(), "run will use: backend native") {
		t.Errorf("text:\n%s", text.String())
	}
	if os.Geteuid() != 0 {
		return
	}
	testenv.RequireRoot(t)
	if native.ProbeCgroups(t.TempDir()).Err != nil {
		t.Skip("no cgroups here")
	}
	if r.Isolation != "full" || !r.Healthy {
		t.Errorf("as root: %s (%s)\n%s", r.Isolation, r.Why, text.String())
	}
}

// TestGVisorCheck: the gvisor check says why -B gvisor cannot run (a
// runsc that is not executable, one too old) and always lists the
// backend's gaps (secrets no longer among them).
func TestGVisorCheck(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "runsc-plain")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "runsc-old")
	if err := os.WriteFile(old, []byte("#!/bin/sh\necho 'runsc version release-20221219.0'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ runsc, want string }{{notExec, "not an executable"}, {old, "too old"}} {
		t.Setenv("AGENTKERNEL_RUNSC", c.runsc)
		got := gvisorCheck(context.Background())
		if got.Status != StatusInfo || !strings.Contains(got.Message, c.want) || !strings.Contains(got.Message, "not supported on gvisor: rootless runs") || strings.Contains(got.Message, "secrets") || got.Fix == "" {
			t.Errorf("%s: %+v", c.runsc, got)
		}
	}
}

// TestContractShown: the report lists every backend with each of its
// known differences from internal/contract, in the JSON and the text,
// so that no backend is silently weaker.
func TestContractShown(t *testing.T) {
	r := &Report{Backend: "native", Contract: contractReport()}
	r.finish(nil)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var shape struct {
		Contract []struct {
			Backend     string `json:"backend"`
			Differences []struct {
				Suite, Check, Want, Why string
			} `json:"differences"`
		} `json:"contract"`
	}
	if err := json.Unmarshal(b, &shape); err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	r.WriteText(&text)
	got := map[string]int{}
	for _, bc := range shape.Contract {
		got[bc.Backend] = len(bc.Differences)
		if bc.Differences == nil {
			t.Errorf("%s: differences is null, not a list", bc.Backend)
		}
		for _, d := range bc.Differences {
			if d.Why == "" || d.Want == "" || d.Check == "" {
				t.Errorf("%s: a difference without its check, result or reason: %+v", bc.Backend, d)
			}
			if !strings.Contains(text.String(), d.Check) || !strings.Contains(text.String(), d.Why) {
				t.Errorf("%s: %s is not in the text report", bc.Backend, d.Check)
			}
		}
	}
	for _, be := range contract.All() {
		n, ok := got[be]
		if !ok {
			t.Errorf("backend %s missing from the report's contract", be)
		}
		if n != len(contract.For(be)) {
			t.Errorf("%s: %d differences shown, %d known", be, n, len(contract.For(be)))
		}
		if !strings.Contains(text.String(), "  "+be+" ") {
			t.Errorf("backend %s missing from the text:\n%s", be, text.String())
		}
	}
}

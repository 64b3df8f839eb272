package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/agentkernel/agentkernel/internal/testenv/kubelab"
)

// These tests run pods: the shared node (containerd and runc, a kubelet
// and a scheduler, internal/testenv/kubelab) starts with the first of
// them. Its runtime, containerd 1.6, cannot give a pod a user namespace,
// so the sandboxes here are made with NoUserNamespace, except in
// TestNodeUserNamespace, which checks what happens to one that asks.

// nodeBackend is a Backend as the administrator in a fresh namespace of
// the cluster with a node.
func nodeBackend(t testing.TB, o Options) *Backend {
	t.Helper()
	l, _ := shared.Node(t)
	cs, err := kubernetes.NewForConfig(restConfig(l, l.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := fmt.Sprintf("n%d-%d", time.Now().UnixNano()%1e6, nsSeq.Add(1))
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o.Namespace = ns
	b, err := NewForConfig(restConfig(l, l.AdminToken), o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// running creates r with b and waits until its pod is Running.
func running(t *testing.T, b *Backend, r *Request) {
	t.Helper()
	_, n := shared.Node(t)
	ctx := context.Background()
	if _, err := b.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Remove(context.Background(), r.Name) })
	phase := waitPhase(t, b, r.Name, 2*time.Minute, corev1.PodRunning, corev1.PodFailed, corev1.PodSucceeded)
	if phase != corev1.PodRunning {
		t.Fatalf("sandbox %s is %s, not Running: %s\nkubelet: %s", r.Name, phase, podReport(t, b, r.Name), n.Log("kubelet.log"))
	}
}

// waitPhase waits until the sandbox's pod is in one of phases (or
// limit passes) and returns its phase.
func waitPhase(t *testing.T, b *Backend, name string, limit time.Duration, phases ...corev1.PodPhase) corev1.PodPhase {
	t.Helper()
	var phase corev1.PodPhase
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
		s, err := b.Get(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		phase = s.Phase
		for _, p := range phases {
			if phase == p {
				return phase
			}
		}
	}
	return phase
}

// podReport is the pod's status and events, for a failure message.
func podReport(t *testing.T, b *Backend, name string) string {
	cs := b.client
	ctx := context.Background()
	var out strings.Builder
	if p, err := cs.CoreV1().Pods(b.Namespace()).Get(ctx, PodName(name), metav1.GetOptions{}); err == nil {
		fmt.Fprintf(&out, "node %q, conditions %v, containers %v", p.Spec.NodeName, p.Status.Conditions, p.Status.ContainerStatuses)
	}
	if ev, err := cs.CoreV1().Events(b.Namespace()).List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range ev.Items {
			fmt.Fprintf(&out, "\nevent %s %s: %s", e.Reason, e.InvolvedObject.Name, e.Message)
		}
	}
	return out.String()
}

// run execs args in the sandbox and returns its exit status and output.
func run(t *testing.T, b *Backend, name, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	io := ExecIO{Stdout: &o, Stderr: &e}
	if stdin != "" {
		io.Stdin = strings.NewReader(stdin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, err := b.Exec(ctx, name, args, io)
	if err != nil {
		t.Fatalf("exec %q: %v", args, err)
	}
	return code, o.String(), e.String()
}

// TestNodeExecAndFiles: a sandbox's pod runs on the node; exec returns
// the command's exit status, stdout and stderr apart, takes stdin, and
// hands arguments over without a shell; the file operations write and
// read bytes back unchanged, whatever the path's characters.
func TestNodeExecAndFiles(t *testing.T) {
	b := nodeBackend(t, Options{NoUserNamespace: true})
	running(t, b, &Request{Name: "exec", Image: kubelab.TestImage, Profile: mustProfile(t, "moderate"), Env: []string{"A=b c", "B=$(x)"}})

	if code, o, e := run(t, b, "exec", "", "sh", "-c", "echo out; echo err >&2; exit 7"); code != 7 || o != "out\n" || e != "err\n" {
		t.Errorf("exit/stdout/stderr = %d %q %q, want 7 out err", code, o, e)
	}
	if code, o, _ := run(t, b, "exec", "line one\nline two\n", "cat"); code != 0 || o != "line one\nline two\n" {
		t.Errorf("stdin: %d %q", code, o)
	}
	// Arguments reach the command as they are: no shell splits or
	// expands them.
	arg := `a b'"; $(touch /tmp/pwned) *`
	if code, o, _ := run(t, b, "exec", "", "printf", "%s|", arg, "two"); code != 0 || o != arg+"|two|" {
		t.Errorf("args: %d %q", code, o)
	}
	if code, o, _ := run(t, b, "exec", "", "sh", "-c", `printf '%s|%s' "$A" "$B"`); code != 0 || o != "b c|$(x)" {
		t.Errorf("env: %d %q", code, o)
	}
	if code, _, _ := run(t, b, "exec", "", "false"); code != 1 {
		t.Errorf("false: exit %d", code)
	}

	ctx := context.Background()
	data := make([]byte, 70000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, p := range []string{"/tmp/plain", `/tmp/a b'c"$(touch pwned);*`, "/tmp/-n"} {
		if err := b.WriteFile(ctx, "exec", p, data); err != nil {
			t.Fatalf("write %q: %v", p, err)
		}
		if code, o, _ := run(t, b, "exec", "", "wc", "-c", p); code != 0 || strings.Fields(o)[0] != strconv.Itoa(len(data)) {
			t.Errorf("written %q: wc -c says %q", p, o)
		}
		got, err := b.ReadFile(ctx, "exec", p, 1<<20)
		if err != nil {
			t.Fatalf("read %q: %v", p, err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("read %q: %d bytes, not the %d written", p, len(got), len(data))
		}
	}
	for _, p := range []string{"/tmp/pwned", "/pwned"} {
		if code, _, _ := run(t, b, "exec", "", "test", "-e", p); code != 1 {
			t.Errorf("a path or argument ran as a command: %s exists", p)
		}
	}
	if _, err := b.ReadFile(ctx, "exec", "/no/such/file", 1<<20); err == nil || !strings.Contains(err.Error(), "exit 1") {
		t.Errorf("read of a missing file: %v", err)
	}
	// Hostile sources: a device that never ends, a file over the
	// limit, a directory.
	for _, c := range []struct{ path, want string }{
		{"/dev/zero", "not a regular file"},
		{"/tmp/plain", "more than"},
		{"/tmp", "not a regular file"},
	} {
		if _, err := b.ReadFile(ctx, "exec", c.path, 1000); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("read of %s with a 1000-byte limit: %v, want %q", c.path, err, c.want)
		}
	}
	if err := b.WriteFile(ctx, "exec", "/no/such/dir/f", data); err == nil {
		t.Error("write into a missing directory succeeded")
	}

	// A running pod ends through its grace period: Remove returns once
	// it is gone, and only then is its NetworkPolicy deleted.
	if err := b.Remove(ctx, "exec"); err != nil {
		t.Fatal(err)
	}
	sel := metav1.ListOptions{LabelSelector: ManagedLabel + "=" + ManagedValue}
	if pl, err := b.client.CoreV1().Pods(b.Namespace()).List(ctx, sel); err != nil || len(pl.Items) != 0 {
		t.Errorf("pods after Remove: %v %v", pl, err)
	}
	if nl, err := b.client.NetworkingV1().NetworkPolicies(b.Namespace()).List(ctx, sel); err != nil || len(nl.Items) != 0 {
		t.Errorf("policies after Remove: %v %v", nl, err)
	}
	if _, err := b.Exec(ctx, "exec", []string{"true"}, ExecIO{}); err == nil {
		t.Error("exec into a removed sandbox succeeded")
	}
}

// capBits are the capability numbers of linux/capability.h.
var capBits = map[string]uint{
	"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6, "SETUID": 7,
	"SETPCAP": 8, "NET_BIND_SERVICE": 10, "NET_RAW": 13, "SYS_CHROOT": 18, "MKNOD": 27, "AUDIT_WRITE": 29, "SETFCAP": 31,
}

func capMask(t *testing.T, caps []string) uint64 {
	var m uint64
	for _, c := range caps {
		b, ok := capBits[c]
		if !ok {
			t.Fatalf("capability %s: add it to capBits", c)
		}
		m |= 1 << b
	}
	return m
}

// statusField reads a field of /proc/self/status's text.
func statusField(status, key string) string {
	for _, l := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// TestNodeSecurityContext: inside a running sandbox of each profile,
// the process has the profile's user, exactly its capabilities (none for
// restrictive: CapEff 0), no_new_privs and a seccomp filter, the
// profile's root filesystem (read-only for restrictive, /tmp writable),
// its memory limit in its cgroup, and no service-account token.
func TestNodeSecurityContext(t *testing.T) {
	b := nodeBackend(t, Options{NoUserNamespace: true})
	for _, tc := range []struct {
		profile string
		uid     string
		ro      bool
		mem     int64
	}{
		{"restrictive", "65532", true, 512 << 20},
		{"moderate", "0", false, 2048 << 20},
		{"permissive", "0", false, 0},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			p := mustProfile(t, tc.profile)
			name := "sc-" + tc.profile
			running(t, b, &Request{Name: name, Image: kubelab.TestImage, Profile: p})
			ctx := context.Background()
			defer func() { _ = b.Remove(ctx, name) }()

			if code, o, _ := run(t, b, name, "", "id", "-u"); code != 0 || strings.TrimSpace(o) != tc.uid {
				t.Errorf("uid = %q (exit %d), want %s", o, code, tc.uid)
			}
			_, status, _ := run(t, b, name, "", "cat", "/proc/self/status")
			want := capMask(t, p.Capabilities)
			if tc.uid != "0" {
				want = 0 // a non-root user's effective set is empty
			}
			for _, f := range []string{"CapEff", "CapPrm", "CapBnd"} {
				got, err := strconv.ParseUint(statusField(status, f), 16, 64)
				w := want
				if f == "CapBnd" {
					w = capMask(t, p.Capabilities)
				}
				if err != nil || got != w {
					t.Errorf("%s = %s, want %016x", f, statusField(status, f), w)
				}
			}
			if v := statusField(status, "NoNewPrivs"); v != "1" {
				t.Errorf("NoNewPrivs = %q, want 1 (allowPrivilegeEscalation: false)", v)
			}
			if v := statusField(status, "Seccomp"); v != "2" {
				t.Errorf("Seccomp = %q, want 2 (a filter: RuntimeDefault)", v)
			}
			code, _, e := run(t, b, name, "", "touch", "/rootfile")
			if tc.ro && (code == 0 || !strings.Contains(e, "Read-only file system")) {
				t.Errorf("write to / in a read-only root: exit %d %q", code, e)
			}
			if !tc.ro && code != 0 {
				t.Errorf("write to / : exit %d %q", code, e)
			}
			if code, _, e := run(t, b, name, "", "touch", "/tmp/f"); code != 0 {
				t.Errorf("write to /tmp: exit %d %q", code, e)
			}
			for _, d := range []string{"/var/run/secrets/kubernetes.io/serviceaccount", "/run/secrets/kubernetes.io/serviceaccount"} {
				if code, _, _ := run(t, b, name, "", "test", "-e", d); code == 0 {
					t.Errorf("%s is mounted: the service account token reached the sandbox", d)
				}
			}
			if tc.mem > 0 {
				_, o, _ := run(t, b, name, "", "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
				if got, err := strconv.ParseInt(strings.TrimSpace(o), 10, 64); err != nil || got != tc.mem {
					t.Errorf("memory limit = %q, want %d", o, tc.mem)
				}
			}
			// Not on the host's network: the pod has a namespace of its
			// own, with only its loopback and its bridge port.
			if _, o, _ := run(t, b, name, "", "cat", "/proc/net/dev"); strings.Contains(o, "akl") || !strings.Contains(o, "eth0") {
				t.Errorf("network devices: %s", o)
			}
		})
	}
}

// TestNodeUserNamespace: a sandbox that asks for a user namespace
// (hostUsers: false, the default) either runs in one (its uid map is
// not the host's) or does not run at all. The node's runtime here,
// containerd 1.6, cannot make one (containerd 2.0 with runc 1.2 can): the
// kubelet refuses the pod, which must then stay un-run rather than run
// as the host's root.
func TestNodeUserNamespace(t *testing.T) {
	b := nodeBackend(t, Options{})
	_, n := shared.Node(t)
	ctx := context.Background()
	s, err := b.Create(ctx, &Request{Name: "userns", Image: kubelab.TestImage, Profile: mustProfile(t, "moderate")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Remove(ctx, "userns") }()
	if !s.UserNamespace {
		t.Fatal("the API server dropped hostUsers: false")
	}
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		s, err := b.Get(ctx, "userns")
		if err != nil {
			t.Fatal(err)
		}
		if s.Phase == corev1.PodRunning {
			_, m, _ := run(t, b, "userns", "", "cat", "/proc/self/uid_map")
			if f := strings.Fields(m); len(f) != 3 || f[0] != "0" || f[1] == "0" {
				t.Fatalf("hostUsers: false, yet uid_map is %q: not a user namespace of its own", m)
			}
			t.Logf("user namespace: uid_map %q", strings.TrimSpace(m))
			return
		}
		ev, err := b.client.CoreV1().Events(b.Namespace()).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ev.Items {
			if e.InvolvedObject.Name == PodName("userns") && strings.Contains(e.Message, "does not support user namespaces") {
				// Still not running, now that the kubelet has given up on it.
				if s, err := b.Get(ctx, "userns"); err != nil || s.Phase == corev1.PodRunning {
					t.Fatalf("after the refusal: %+v %v", s, err)
				}
				t.Logf("refused, as the runtime cannot: %s", e.Message)
				return
			}
		}
	}
	t.Fatalf("the pod neither ran nor was refused: %s\nkubelet: %s", podReport(t, b, "userns"), n.Log("kubelet.log"))
}

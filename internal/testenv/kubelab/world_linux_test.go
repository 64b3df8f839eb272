//go:build linux

package kubelab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/agentkernel/agentkernel/internal/image/imagetest"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// shared is the API server (and, on first use, the cluster with a node)
// of the tests that use one already running.
var shared Shared

func TestMain(m *testing.M) { os.Exit(shared.RunTests(m)) }

// podLab is a client of the shared node's cluster and a namespace of its
// own (with the default service account no controller makes here).
type podLab struct {
	cfg *rest.Config
	cs  kubernetes.Interface
	ns  string
	n   *Node
}

func newPodLab(t *testing.T) *podLab {
	t.Helper()
	l, n := shared.Node(t)
	cfg := &rest.Config{Host: l.URL, BearerToken: l.AdminToken, TLSClientConfig: rest.TLSClientConfig{CAData: l.CAData}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	p := &podLab{cfg: cfg, cs: cs, ns: "t-" + hex.EncodeToString(r[:]), n: n}
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(p.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return p
}

// create makes a pod of image running command, and removes it when the
// test ends.
func (p *podLab) create(t *testing.T, name, image string, command ...string) {
	t.Helper()
	no := false
	var zero int64
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		AutomountServiceAccountToken: &no, TerminationGracePeriodSeconds: &zero,
		Containers: []corev1.Container{{Name: "c", Image: image, ImagePullPolicy: corev1.PullNever, Command: command}},
	}}
	if _, err := p.cs.CoreV1().Pods(p.ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cs.CoreV1().Pods(p.ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
}

// waitPod waits until ok says yes of the pod, or fails.
func (p *podLab) waitPod(t *testing.T, name, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		var err error
		if pod, err = p.cs.CoreV1().Pods(p.ns).Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if ok(pod) {
			return pod
		}
	}
	t.Fatalf("pod %s: not %s: %+v\nkubelet: %s", name, what, pod.Status, p.n.Log("kubelet.log"))
	return nil
}

func (p *podLab) running(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	return p.waitPod(t, name, "Running", func(pod *corev1.Pod) bool { return pod.Status.Phase == corev1.PodRunning })
}

// exec runs argv in the pod's container: its output (stdout, then
// stderr) and whether it exited 0.
func (p *podLab) exec(t *testing.T, pod string, argv ...string) (string, bool) {
	t.Helper()
	req := p.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "c", Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	exe, err := remotecommand.NewWebSocketExecutor(p.cfg, "GET", req.URL().String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	err = exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errb})
	if err != nil && !strings.Contains(err.Error(), "exit code") {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return out.String() + errb.String(), err == nil
}

// unreachable checks that a pod's TCP connection to addr gets nowhere:
// no answer, no HTTP status. (This busybox's wget has no -T.)
func (p *podLab) unreachable(t *testing.T, pod, addr string) {
	t.Helper()
	out, ok := p.exec(t, pod, "timeout", "4", "wget", "-O-", "http://"+addr+"/")
	if ok || strings.Contains(out, "HTTP") || !strings.Contains(out, "Connecting to") {
		t.Errorf("a pod reached %s: %q", addr, out)
	}
	t.Logf("%s: %s", addr, strings.TrimSpace(out))
}

// eventually waits a little for f, which counts what a world received
// from a command that has returned.
func eventually(f func() bool) bool {
	for i := 0; i < 20 && !f(); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	return f()
}

// TestNodeWorld: a pod on the node reaches a world's servers at its
// address of WorldNet, through the pod's one route, and nothing else:
// not the node's own address, with or without a world, and nothing at
// all once the world is closed.
func TestNodeWorld(t *testing.T) {
	p := newPodLab(t)
	p.create(t, "w", TestImage, "sleep", "infinity")
	pod := p.running(t, "w")
	_, subnet, _ := net.ParseCIDR(PodSubnet)
	if ip := net.ParseIP(pod.Status.PodIP); !subnet.Contains(ip) || ip.Equal(net.ParseIP(WorldGateway)) {
		t.Fatalf("pod IP %s", pod.Status.PodIP)
	}
	routes, _ := p.exec(t, "w", "ip", "route")
	if !strings.Contains(routes, WorldNet+" via "+WorldGateway) || strings.Contains(routes, "default") {
		t.Errorf("the pod's routes:\n%s", routes)
	}
	node := net.JoinHostPort(p.n.ip.String(), strconv.Itoa(p.n.kubeletPort))
	p.unreachable(t, "w", node) // the kubelet listens there, for the host

	ctx := context.Background()
	w, err := p.n.StartWorld(ctx, []string{"Example.TEST.", "*.wild.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := p.n.StartWorld(ctx, nil); err == nil {
		t.Error("a second world started on the node")
	}
	ip := w.IP().String()
	if !strings.HasPrefix(ip, "198.1") || w.IP().Equal(p.n.ip) {
		t.Fatalf("world IP %s (node %s)", ip, p.n.ip)
	}

	if out, ok := p.exec(t, "w", "timeout", "10", "wget", "-qO-", "http://"+ip+"/"); !ok || out != "world "+ip+"\n" {
		t.Errorf("wget http://%s/: %q", ip, out)
	}
	if out, ok := p.exec(t, "w", "timeout", "10", "wget", "-qO-", "--header", "Host: example.test", "http://"+ip+"/x"); !ok || out != "world example.test\n" {
		t.Errorf("wget with Host example.test: %q", out)
	}
	if got := strings.Join(w.Requests(), " "); got != ip+" example.test" {
		t.Errorf("requests: %q", got)
	}

	for _, name := range []string{"example.test", "a.b.wild.test"} {
		out, _ := p.exec(t, "w", "nslookup", name, ip)
		if !strings.Contains(out, "Address: "+ip) || strings.Contains(out, "NXDOMAIN") {
			t.Errorf("nslookup %s:\n%s", name, out)
		}
		if w.Queries(name) == 0 {
			t.Errorf("no query for %s counted", name)
		}
	}
	for _, name := range []string{"other.test", "wild.test", "x.example.test"} {
		out, _ := p.exec(t, "w", "nslookup", name, ip)
		if !strings.Contains(out, "NXDOMAIN") || strings.Contains(out, "Address: "+ip) {
			t.Errorf("nslookup %s:\n%s", name, out)
		}
		if w.Queries(name) == 0 {
			t.Errorf("no query for %s counted", name)
		}
	}
	if w.Queries("never.test") != 0 {
		t.Error("a query never asked was counted")
	}

	if w.Accepted() != 0 || w.Datagrams() != 0 {
		t.Fatalf("counted before anything was sent: %d %d", w.Accepted(), w.Datagrams())
	}
	if out, ok := p.exec(t, "w", "sh", "-c", fmt.Sprintf("nc -w 5 %s %d </dev/null", ip, WorldTCPPort)); !ok {
		t.Errorf("nc %s %d: %q", ip, WorldTCPPort, out)
	}
	if !eventually(func() bool { return w.Accepted() == 1 }) {
		t.Errorf("accepted %d connections, want 1", w.Accepted())
	}
	// A TFTP read request is a datagram to the port; nothing answers it.
	p.exec(t, "w", "timeout", "3", "tftp", "-g", "-r", "x", "-l", "/tmp/x", ip, strconv.Itoa(WorldUDPPort))
	if !eventually(func() bool { return w.Datagrams() > 0 }) {
		t.Error("no datagram counted")
	}

	// The node's address is not the world's: packets for it stop there.
	p.unreachable(t, "w", node)
	p.exec(t, "w", "sh", "-c", fmt.Sprintf("nc -w 3 %s %d </dev/null", p.n.ip, WorldTCPPort))
	if w.Accepted() != 1 {
		t.Errorf("a connection to the node's address reached the world: %d", w.Accepted())
	}

	w.Close()
	if _, err := net.InterfaceByName(p.n.worldLink()); err == nil {
		t.Errorf("%s left after Close", p.n.worldLink())
	}
	p.unreachable(t, "w", ip)
	if n := len(w.Requests()); n != 2 {
		t.Errorf("%d requests after Close", n)
	}
	// Another world may start once this one is gone.
	w2, err := p.n.StartWorld(ctx, []string{"example.test"})
	if err != nil {
		t.Fatal(err)
	}
	w2.Close()
}

// TestNodeImport: an image added to the running node (a binary this
// test builds, alone in its layer) runs as a pod; before the import a
// pod of it could not start.
func TestNodeImport(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		testenv.Missing(t, "the go command is not on PATH: %v", err)
	}
	p := newPodLab(t)
	var r [8]byte
	_, _ = rand.Read(r[:])
	token := hex.EncodeToString(r[:])
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(`package main

import (
	"os"
	"time"
)

func main() {
	os.Stdout.WriteString("imported `+token+`\n")
	for {
		time.Sleep(time.Hour)
	}
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	build := exec.Command(gobin, "build", "-o", filepath.Join(dir, "hello"), src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOTOOLCHAIN=local", "GOFLAGS=")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	bin, err := os.ReadFile(filepath.Join(dir, "hello"))
	if err != nil {
		t.Fatal(err)
	}
	ref := "agentkernel.test/imported-" + token[:8] + ":1"
	img := imagetest.Image(t, v1.Config{Entrypoint: []string{"/hello"}}, imagetest.Layer(t, imagetest.File{Name: "hello", Body: string(bin), Mode: 0o755}))

	p.create(t, "before", ref)
	p.waitPod(t, "before", "ErrImageNeverPull", func(pod *corev1.Pod) bool {
		for _, c := range pod.Status.ContainerStatuses {
			if c.State.Waiting != nil && c.State.Waiting.Reason == "ErrImageNeverPull" {
				return true
			}
		}
		return false
	})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := p.n.Import(ctx, map[string]v1.Image{ref: img}); err != nil {
		t.Fatal(err)
	}
	p.create(t, "after", ref)
	p.running(t, "after")
	var logs string
	for i := 0; i < 50; i++ {
		b, err := p.cs.CoreV1().Pods(p.ns).GetLogs("after", &corev1.PodLogOptions{Container: "c"}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if logs = string(b); logs != "" {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if logs != "imported "+token+"\n" {
		t.Errorf("the imported binary said %q", logs)
	}
	if err := p.n.Import(ctx, map[string]v1.Image{"agentkernel.test/x:1": img, "not a reference": img}); err == nil {
		t.Error("Import took a bad reference")
	}
}

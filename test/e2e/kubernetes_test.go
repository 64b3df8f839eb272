//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agentkernel/agentkernel/internal/image/imagetest"
	"github.com/agentkernel/agentkernel/internal/testenv"
	"github.com/agentkernel/agentkernel/internal/testenv/kubelab"
)

// TestKubernetesHandOff: `agentkernel ... -B kubernetes` goes from the
// agentkernel binary to agentkernel-full to agentkernel-kube (two
// execve's) and reaches a real kube-apiserver (no kubelet: the pod stays
// Pending).
func TestKubernetesHandOff(t *testing.T) {
	bin, ok := kubelab.Dir()
	if !ok {
		testenv.Missing(t, "%s", kubelab.MissingHint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	l, err := kubelab.Start(ctx, bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	build := exec.Command("go", "build", "-o", filepath.Dir(binary)+"/", "github.com/agentkernel/agentkernel/cmd/agentkernel-kube")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building agentkernel-kube: %v\n%s", err, out)
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: l.URL, BearerToken: l.AdminToken, TLSClientConfig: rest.TLSClientConfig{CAData: l.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "e2e"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kc, err := l.Kubeconfig("e2e.kubeconfig", l.AdminToken, ns)
	if err != nil {
		t.Fatal(err)
	}
	a := newAK(t)
	cfg := filepath.Join(a.home, "kube.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[orchestrator]\nkubeconfig = %q\n", kc)), 0o600); err != nil {
		t.Fatal(err)
	}
	r := a.run("sandbox", "create", "web", "-B", "kubernetes", "-c", cfg, "--image", "alpine:3.20", "-p", "restrictive")
	if r.code != 0 || r.stdout != "web\n" || !strings.Contains(r.stderr, "pod agentkernel-web in namespace e2e") {
		t.Fatalf("create: %s", r)
	}
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, "agentkernel-web", metav1.GetOptions{})
	if err != nil || pod.Labels["agentkernel.io/sandbox"] != "web" {
		t.Fatalf("pod: %v %v", pod, err)
	}
	if r := a.run("ps", "-B", "k8s", "--config", cfg); r.code != 0 || !strings.Contains(r.stdout, "web") {
		t.Errorf("ps: %s", r)
	}
	if r := a.run("sandbox", "create", "Web", "-B", "kubernetes", "-c", cfg, "--image", "x"); r.code != 125 || !strings.Contains(r.stderr, "not a DNS label") {
		t.Errorf("bad name: %s", r)
	}
	if r := a.run("rm", "web", "--backend=kubernetes", "-c", cfg); r.code != 0 {
		t.Errorf("rm: %s", r)
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("pods left: %v %v", pods, err)
	}
	// Without -B kubernetes the same command line stays with the native
	// backend's sandboxes.
	if r := a.run("sandbox", "list"); strings.Contains(r.stdout, "web") {
		t.Errorf("native list shows the pod: %s", r)
	}
}

// TestKubernetesNodeExec: with a node beside the API server (containerd,
// kubelet, scheduler: internal/testenv/kubelab), `agentkernel sandbox
// create -B kubernetes` makes a pod that runs, and `sandbox exec` runs
// commands in it through the agentkernel → agentkernel-full →
// agentkernel-kube hand-off: exit status, stdout and stderr apart, stdin.
func TestKubernetesNodeExec(t *testing.T) {
	bin, ok := kubelab.Dir()
	if !ok {
		testenv.Missing(t, "%s", kubelab.MissingHint)
	}
	if m := kubelab.NodeReady(bin); len(m) > 0 {
		testenv.Missing(t, "missing %s: %s", strings.Join(m, ", "), kubelab.NodeMissingHint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	l, err := kubelab.Start(ctx, bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	images := map[string]v1.Image{kubelab.PauseImage: kubelab.PauseImageFor(t), kubelab.TestImage: imagetest.BusyboxImage(t)}
	ndir, err := os.MkdirTemp("", "kln-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(ndir)
	n, err := l.StartNode(ctx, bin, ndir, images)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		n.Close()
		if left := n.Leftovers(); len(left) > 0 {
			t.Errorf("the node left behind: %v", left)
		}
	}()
	build := exec.Command("go", "build", "-o", filepath.Dir(binary)+"/", "github.com/agentkernel/agentkernel/cmd/agentkernel-kube")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building agentkernel-kube: %v\n%s", err, out)
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: l.URL, BearerToken: l.AdminToken, TLSClientConfig: rest.TLSClientConfig{CAData: l.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "e2e"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kc, err := l.Kubeconfig("e2e.kubeconfig", l.AdminToken, ns)
	if err != nil {
		t.Fatal(err)
	}
	a := newAK(t)
	cfg := filepath.Join(a.home, "kube.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[orchestrator]\nkubeconfig = %q\n", kc)), 0o600); err != nil {
		t.Fatal(err)
	}
	// containerd 1.6 cannot give a pod a user namespace: without
	// --no-user-namespace the kubelet refuses the pod.
	if r := a.run("sandbox", "create", "box", "-B", "kubernetes", "-c", cfg, "--image", kubelab.TestImage, "-p", "restrictive", "--no-user-namespace"); r.code != 0 {
		t.Fatalf("create: %s", r)
	}
	defer a.run("sandbox", "remove", "box", "-B", "kubernetes", "-c", cfg)
	var phase corev1.PodPhase
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline) && phase != corev1.PodRunning; time.Sleep(300 * time.Millisecond) {
		pod, err := cs.CoreV1().Pods(ns).Get(ctx, "agentkernel-box", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		phase = pod.Status.Phase
	}
	if phase != corev1.PodRunning {
		t.Fatalf("pod is %s, not Running\nkubelet: %s", phase, n.Log("kubelet.log"))
	}
	r := a.run("sandbox", "exec", "box", "-B", "kubernetes", "-c", cfg, "--", "sh", "-c", "id -u; echo oops >&2; exit 3")
	if r.code != 3 || r.stdout != "65532\n" || r.stderr != "oops\n" {
		t.Errorf("exec: %s", r)
	}
	a.stdin = "from stdin\n"
	if r := a.run("sandbox", "exec", "box", "-B", "kubernetes", "-c", cfg, "--", "cat"); r.code != 0 || r.stdout != "from stdin\n" {
		t.Errorf("exec with stdin: %s", r)
	}
	a.stdin = ""
	if r := a.run("sandbox", "exec", "box", "-B", "kubernetes", "-c", cfg, "--", "touch", "/x"); r.code == 0 || !strings.Contains(r.stderr, "Read-only file system") {
		t.Errorf("write to a restrictive sandbox's root: %s", r)
	}
	// cp both ways, through the pod's /tmp (its root is read-only).
	src := filepath.Join(t.TempDir(), "in.bin")
	payload := strings.Repeat("0123456789abcdef", 5000) + "end\n"
	if err := os.WriteFile(src, []byte(payload), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := a.run("cp", "-B", "kubernetes", "-c", cfg, src, "box:/tmp/in.bin"); r.code != 0 {
		t.Errorf("cp in: %s", r)
	}
	if r := a.run("sandbox", "exec", "box", "-B", "kubernetes", "-c", cfg, "--", "wc", "-c", "/tmp/in.bin"); r.code != 0 || !strings.HasPrefix(r.stdout, fmt.Sprint(len(payload))) {
		t.Errorf("the file cp put there: %s", r)
	}
	out := t.TempDir()
	if r := a.run("cp", "-B", "kubernetes", "-c", cfg, "box:/tmp/in.bin", out); r.code != 0 {
		t.Errorf("cp out: %s", r)
	}
	if b, err := os.ReadFile(filepath.Join(out, "in.bin")); err != nil || string(b) != payload {
		t.Errorf("cp out: %d bytes (%v), want the %d put in", len(b), err, len(payload))
	}
	if r := a.run("cp", "-B", "kubernetes", "-c", cfg, src, filepath.Join(out, "x")); r.code == 0 {
		t.Errorf("cp with no sandbox side: %s", r)
	}
	if r := a.run("sandbox", "remove", "box", "-B", "kubernetes", "-c", cfg); r.code != 0 {
		t.Errorf("remove: %s", r)
	}
	if r := a.run("sandbox", "exec", "box", "-B", "kubernetes", "-c", cfg, "--", "true"); r.code == 0 {
		t.Errorf("exec into a removed sandbox: %s", r)
	}

	// run -B kubernetes: a pod for the one command, its exit status and
	// streams, standard input with -i, and nothing left after.
	managed := func() int {
		t.Helper()
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				n++
			}
		}
		return n
	}
	r = a.run("run", "-B", "kubernetes", "-c", cfg, "--no-user-namespace", "--image", kubelab.TestImage, "-p", "restrictive", "--", "sh", "-c", "echo ran as $(id -u); echo err >&2; exit 5")
	if r.code != 5 || r.stdout != "ran as 65532\n" || r.stderr != "err\n" {
		t.Errorf("run -B kubernetes: %s", r)
	}
	a.stdin = "piped\n"
	if r := a.run("run", "-B", "kubernetes", "-c", cfg, "--no-user-namespace", "--image", kubelab.TestImage, "-i", "--", "cat"); r.code != 0 || r.stdout != "piped\n" {
		t.Errorf("run -i -B kubernetes: %s", r)
	}
	a.stdin = ""
	// From a warm pool: the run adopts the pool's Running pod and runs
	// the command in it straight away; the pod goes after.
	if r := a.run("pool", "fill", "rp", "-B", "kubernetes", "-c", cfg, "--no-user-namespace", "--image", kubelab.TestImage, "-p", "restrictive", "--size", "1"); r.code != 0 {
		t.Fatalf("pool fill: %s", r)
	}
	poolPods := func() (running, all int) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "agentkernel.io/pool=rp"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				all++
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
		}
		return running, all
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if n, _ := poolPods(); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pool's pod did not run within 2 minutes")
		}
	}
	r = a.run("run", "-B", "kubernetes", "-c", cfg, "--no-user-namespace", "--image", kubelab.TestImage, "-p", "restrictive", "--pool", "rp", "--", "sh", "-c", "echo pooled as $(id -u); exit 4")
	if r.code != 4 || r.stdout != "pooled as 65532\n" {
		t.Errorf("run --pool: %s", r)
	}
	if _, all := poolPods(); all != 0 {
		t.Errorf("%d pods still wait in the pool after a run took its only one", all)
	}
	if r := a.run("pool", "drain", "rp", "-B", "kubernetes", "-c", cfg); r.code != 0 {
		t.Errorf("pool drain: %s", r)
	}
	if n := managed(); n != 0 {
		t.Errorf("%d pods left after the runs", n)
	}
	// A pod that never starts (no registry serves the image): exit 125,
	// the pod's reason said, nothing left.
	r = a.run("run", "-B", "kubernetes", "-c", cfg, "--no-user-namespace", "--image", "registry.invalid/none:1", "--start-timeout", "5s", "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, "did not start") {
		t.Errorf("run of an image no one serves: %s", r)
	}
	if n := managed(); n != 0 {
		t.Errorf("%d pods left after a run that did not start", n)
	}
}

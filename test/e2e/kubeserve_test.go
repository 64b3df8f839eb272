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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	kbe "github.com/agentkernel/agentkernel/internal/backend/kubernetes"

	"github.com/agentkernel/agentkernel/internal/contract"
	"github.com/agentkernel/agentkernel/internal/image/imagetest"
	"github.com/agentkernel/agentkernel/internal/testenv"
	"github.com/agentkernel/agentkernel/internal/testenv/kubelab"
)

// TestAPIContractKubernetes: the API suite of TestAPIContractBackends
// (the same cases, apiContractCases) and the Node SDK's script
// (nodeSDKContractCases, detached commands included) against
// `agentkernel serve` whose
// configuration says [sandbox] backend = "kubernetes": agentkernel-full
// hands serve to agentkernel-kube, whose runs and persistent sandboxes
// are pods on a real API server and node (internal/testenv/kubelab:
// containerd and kubelet), the node holding the registry's test image
// under its reference. What pods do not do as native does is in
// internal/contract's kubernetes rows.
func TestAPIContractKubernetes(t *testing.T) {
	bin, ok := kubelab.Dir()
	if !ok {
		testenv.Missing(t, "%s", kubelab.MissingHint)
	}
	if m := kubelab.NodeReady(bin); len(m) > 0 {
		testenv.Missing(t, "missing %s: %s", strings.Join(m, ", "), kubelab.NodeMissingHint)
	}
	sdkDir := installNodeSDK(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a, ref := withRegistry(t)
	l, err := kubelab.Start(ctx, bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// The egress proxy's image: this build's agentkernel-full.
	full, err := os.ReadFile(filepath.Join(filepath.Dir(binary), "agentkernel-full"))
	if err != nil {
		t.Fatal(err)
	}
	const egressRef = "agentkernel.test/egress:1"
	images := map[string]v1.Image{kubelab.PauseImage: kubelab.PauseImageFor(t), ref: testImage(t, "registry"),
		egressRef: imagetest.Image(t, v1.Config{}, imagetest.Layer(t, imagetest.Dir("usr"), imagetest.Dir("usr/local"), imagetest.Dir("usr/local/bin"),
			imagetest.File{Name: "usr/local/bin/agentkernel-full", Body: string(full), Mode: 0o755}))}
	ndir, err := os.MkdirTemp("", "kls-")
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
	const ns = "serve"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kc, err := l.Kubeconfig("serve.kubeconfig", l.AdminToken, ns)
	if err != nil {
		t.Fatal(err)
	}
	// containerd 1.6 cannot give a pod a user namespace.
	// controller = "on": serve also reconciles AgentSandbox objects, as
	// it does by default inside a cluster.
	// The pods' world (kubelab.World): what a domain allow-list reaches,
	// asked through the egress proxy.
	world, err := n.StartWorld(ctx, []string{"allowed.test", "denied.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer world.Close()
	cfg := fmt.Sprintf("[sandbox]\nbackend = \"kubernetes\"\n\n[orchestrator]\nkubeconfig = %q\nno_user_namespace = true\ncontroller = \"on\"\negress_image = %q\negress_dns = [%q]\n",
		kc, egressRef, world.IP().String()+":53")
	p := filepath.Join(a.home, ".config", "agentkernel", "config.toml")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	a.must("crds", "install", "-B", "kubernetes")
	s := startServe(t, a, "listening on ", "serve", "--port", "0", "--api-key", apiKey)
	c := s.client(apiKey)
	const name = "contract-api"
	backend := contract.Kubernetes
	checkContract(t, backend, contract.SuiteAPI, apiContractCases(ctx, s, c, ref, backend, name))
	// The official Node SDK's script, as TestNodeSDKContract runs it,
	// held to the same rows: its detached commands run in the pod.
	if err := os.WriteFile(filepath.Join(sdkDir, "sdk.mjs"), []byte(nodeSDKScript), 0o644); err != nil {
		t.Fatal(err)
	}
	sdk := runNodeSDKScript(t, sdkDir, s.url, ref)
	checkContract(t, backend, contract.SuiteNodeSDK, nodeSDKContractCases(&sdk))
	for _, n := range []string{"node-sdk", "node-snap"} {
		if _, err := c.GetSandbox(ctx, n); err == nil {
			s.raw("DELETE", "/sandboxes/"+n, "")
		}
	}

	// What pods cannot do is refused in the API's words, and nothing
	// was made for it.
	// A domain allow-list: the run's pod gets the egress proxy; the
	// allowed name answers, another name does not resolve.
	r := s.raw("POST", "/run", `{"command":["sh","-c","timeout 10 wget -qO- http://allowed.test/; timeout 10 wget -qO- http://denied.test/ 2>/dev/null || echo refused"],"image":"`+ref+`","network":"filtered","allow_domains":["allowed.test"]}`)
	if r.status != 200 || !strings.Contains(string(r.body), `world allowed.test\nrefused`) {
		t.Errorf("a domain allow-list: %d %s", r.status, r.body)
	}
	if q := world.Queries("denied.test"); q != 0 {
		t.Errorf("the world was asked for denied.test %d times", q)
	}
	if r := s.raw("POST", "/sandboxes", `{"name":"snapsrc","image":"`+ref+`"}`); r.status != 201 {
		t.Errorf("create: %d %s", r.status, r.body)
	} else {
		// The record is in the namespace: a second server (a replica,
		// with a data directory of its own) sees the sandbox and cannot
		// take its name.
		a2 := *a
		a2.dataDir = t.TempDir()
		s2 := startServe(t, &a2, "listening on ", "serve", "--port", "0", "--api-key", apiKey)
		if r := s2.raw("GET", "/sandboxes/snapsrc", ""); r.status != 200 || !strings.Contains(string(r.body), `"snapsrc"`) {
			t.Errorf("the second server's get: %d %s", r.status, r.body)
		}
		if r := s2.raw("POST", "/sandboxes", `{"name":"snapsrc","image":"`+ref+`"}`); r.status != 409 {
			t.Errorf("the second server's create of the name: %d %s", r.status, r.body)
		}
		s2.stop()
		if sec, err := cs.CoreV1().Secrets(ns).Get(ctx, kbe.RecordName("snapsrc"), metav1.GetOptions{}); err != nil || sec.Type != kbe.RecordType {
			t.Errorf("the record's Secret: %v", err)
		}
		if r := s.raw("POST", "/snapshots", `{"sandbox":"snapsrc","name":"snap1"}`); r.status != 501 {
			t.Errorf("a snapshot of a pod: %d %s", r.status, r.body)
		}
		if r := s.raw("DELETE", "/sandboxes/snapsrc", ""); r.status != 200 {
			t.Errorf("remove: %d %s", r.status, r.body)
		}
		if _, err := cs.CoreV1().Secrets(ns).Get(ctx, kbe.RecordName("snapsrc"), metav1.GetOptions{}); err == nil {
			t.Error("the record's Secret outlived the sandbox")
		}
	}
	// serve reconciles the CRDs: an AgentSandbox gets its pod, and loses
	// it with the object.
	t.Run("controller", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(&rest.Config{Host: l.URL, BearerToken: l.AdminToken, TLSClientConfig: rest.TLSClientConfig{CAData: l.CAData}})
		if err != nil {
			t.Fatal(err)
		}
		objs := dyn.Resource(kbe.SandboxResource).Namespace(ns)
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "agentkernel.io/v1alpha1", "kind": "AgentSandbox",
			"metadata": map[string]any{"name": "crd-sb"}, "spec": map[string]any{"image": ref}}}
		if _, err := objs.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		podIs := func(live bool) func() bool {
			return func() bool {
				p, err := cs.CoreV1().Pods(ns).Get(ctx, kbe.PodName("crd-sb"), metav1.GetOptions{})
				return live == (err == nil && p.DeletionTimestamp == nil)
			}
		}
		waitUntil(t, "pod of the AgentSandbox", podIs(true))
		if err := objs.Delete(ctx, "crd-sb", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "removal of the pod with its AgentSandbox", podIs(false))
	})
	// Every answer, refusals included, is one openapi.yaml describes.
	t.Run("openapi", func(t *testing.T) { s.rec.validateAnswers(t) })
	// A case that failed half-way leaves its sandbox: remove it while
	// the server runs.
	if _, err := c.GetSandbox(ctx, name); err == nil {
		s.raw("DELETE", "/sandboxes/"+name, "")
	}
	// A detached command lives in its pod, not in the server: one
	// started afresh finds it running, reads its output and kills it.
	const keep = "detach-keep"
	if r := s.raw("POST", "/sandboxes", `{"name":"`+keep+`","image":"`+ref+`"}`); r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	d, err := c.ExecDetached(ctx, keep, []string{"sh", "-c", "echo kept; exec sleep 4747"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.stop()
	s = startServe(t, a, "listening on ", "serve", "--port", "0", "--api-key", apiKey)
	c = s.client(apiKey)
	if st, err := c.DetachedStatus(ctx, keep, d.ID); err != nil || st.Status != "running" || st.Pid != d.Pid || st.StartedAt != d.StartedAt {
		t.Errorf("after a restart of serve: %+v %v, started as %+v", st, err, d)
	}
	waitUntil(t, "the detached command's output", func() bool {
		out, err := c.DetachedLogs(ctx, keep, d.ID, "stdout", 0)
		return err == nil && out == "kept\n"
	})
	if err := c.DetachedKill(ctx, keep, d.ID); err != nil {
		t.Errorf("kill after a restart: %v", err)
	}
	if st, err := c.DetachedStatus(ctx, keep, d.ID); err != nil || st.Status != "failed" || st.ExitCode == nil || *st.ExitCode != 137 {
		t.Errorf("after the kill: %+v %v", st, err)
	}
	if r := s.raw("DELETE", "/sandboxes/"+keep, ""); r.status != 200 {
		t.Errorf("remove: %d %s", r.status, r.body)
	}
	s.stop()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			t.Errorf("pod %s left after the suite", p.Name)
		}
	}
}

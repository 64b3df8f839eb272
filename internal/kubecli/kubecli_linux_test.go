package kubecli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	kube "github.com/agentkernel/agentkernel/internal/backend/kubernetes"
	"github.com/agentkernel/agentkernel/internal/testenv/kubelab"
)

// The command line against a real kube-apiserver (no kubelet: pods stay
// Pending; exec is not tried).
var shared kubelab.Shared

func TestMain(m *testing.M) { os.Exit(shared.RunTests(m)) }

func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

// setup makes a namespace and a user configuration file whose
// [orchestrator] names the kubeconfig and the namespace.
func setup(t *testing.T, token string) (cfgPath, ns string) {
	t.Helper()
	l := shared.Get(t)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: l.URL, BearerToken: l.AdminToken, TLSClientConfig: rest.TLSClientConfig{CAData: l.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	ns = fmt.Sprintf("cli-%d", time.Now().UnixNano()%1e9)
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kc, err := l.Kubeconfig(ns+".kubeconfig", token, "default")
	if err != nil {
		t.Fatal(err)
	}
	cfgPath = filepath.Join(t.TempDir(), "config.toml")
	toml := fmt.Sprintf("[orchestrator]\nkubeconfig = %q\nnamespace = %q\nmax_sandboxes = 3\n", kc, ns)
	if err := os.WriteFile(cfgPath, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgPath, ns
}

func TestCreateListRemove(t *testing.T) {
	cfg, ns := setup(t, shared.Get(t).AdminToken)
	out, errs, code := run(t, "sandbox", "create", "web", "-B", "kubernetes", "--config", cfg, "--image", "alpine:3.20", "--profile", "restrictive", "--ttl", "1h")
	if code != 0 || out != "web\n" || !strings.Contains(errs, "pod agentkernel-web in namespace "+ns) {
		t.Fatalf("create: %d %q %q", code, out, errs)
	}
	// The flat form, with the flag before the command.
	if _, errs, code := run(t, "-B", "k8s", "--config", cfg, "create", "db", "--image", "postgres:17", "--network", "10.0.0.0/8"); code != 0 {
		t.Fatalf("flat create: %d %s", code, errs)
	}
	out, errs, code = run(t, "sandbox", "list", "--json", "--config", cfg)
	if code != 0 {
		t.Fatalf("list: %d %s", code, errs)
	}
	var rows []struct{ Name, Phase, Image, Profile, Network, ExpiresAt string }
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rows) != 2 || rows[0].Name != "db" || rows[0].Network != "cidrs" || rows[1].Name != "web" || rows[1].Profile != "restrictive" || rows[1].Phase != "Pending" {
		t.Fatalf("rows = %+v", rows)
	}
	out, _, _ = run(t, "ps", "--config", cfg)
	if !strings.HasPrefix(out, "NAME") || !strings.Contains(out, "web") {
		t.Errorf("table: %q", out)
	}
	// [orchestrator] max_sandboxes = 3.
	run(t, "sandbox", "create", "c3", "--config", cfg, "--image", "busybox")
	if _, errs, code := run(t, "sandbox", "create", "c4", "--config", cfg, "--image", "busybox"); code != 125 || !strings.Contains(errs, "max_sandboxes = 3") {
		t.Errorf("fourth sandbox: %d %q", code, errs)
	}
	out, errs, code = run(t, "sandbox", "rm", "web", "db", "c3", "--config", cfg)
	if code != 0 || out != "web\ndb\nc3\n" {
		t.Fatalf("remove: %d %q %q", code, out, errs)
	}
	if _, errs, code := run(t, "sandbox", "remove", "web", "--config", cfg); code != 125 || !strings.Contains(errs, "no such sandbox") {
		t.Errorf("remove again: %d %q", code, errs)
	}
	if out, _, _ := run(t, "sandbox", "list", "--json", "--config", cfg); strings.TrimSpace(out) != "[]" {
		t.Errorf("left: %s", out)
	}
}

func TestRefusals(t *testing.T) {
	cfg, _ := setup(t, shared.Get(t).AdminToken)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sandbox", "create", "Bad_Name", "--image", "a"}, "not a DNS label"},
		{[]string{"sandbox", "create", "../../etc", "--image", "a"}, "not a DNS label"},
		{[]string{"sandbox", "create", "ok", "--image", "a", "--network", "github.com"}, "set [orchestrator] egress_image"},
		{[]string{"sandbox", "create", "ok", "--image", "a", "--network", "10.0.0.0/33"}, "not an address range or a domain name"},
		{[]string{"sandbox", "create", "ok", "--image", "a", "--profile", "root"}, "unknown profile"},
		{[]string{"sandbox", "create", "ok"}, "an image is required"},
		{[]string{"sandbox", "create", "ok", "--image", "a", "-B", "docker"}, "only -B kubernetes"},
		{[]string{"sandbox", "rm", "x", "A"}, "not a DNS label"},
	} {
		args := append(tc.args, "--config", cfg)
		_, errs, code := run(t, args...)
		if code != 125 || !strings.Contains(errs, tc.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: %d %q", tc.args, code, errs)
		}
	}
}

func TestWrongToken(t *testing.T) {
	cfg, _ := setup(t, "wrong-token")
	_, errs, code := run(t, "sandbox", "list", "--config", cfg)
	if code != 125 || !strings.Contains(errs, "401 Unauthorized") || !strings.Contains(errs, "check the kubeconfig") {
		t.Errorf("wrong token: %d %q", code, errs)
	}
	cfg, _ = setup(t, shared.Get(t).UserToken)
	_, errs, code = run(t, "sandbox", "create", "x", "--image", "a", "--config", cfg)
	if code != 125 || !strings.Contains(errs, "forbidden (403)") {
		t.Errorf("no role: %d %q", code, errs)
	}
}

func TestControllerOnce(t *testing.T) {
	cfg, ns := setup(t, shared.Get(t).AdminToken)
	if _, errs, code := run(t, "controller", "--once", "--install-crds", "--config", cfg); code != 0 {
		t.Fatalf("controller: %d %s", code, errs)
	}
	l := shared.Get(t)
	dc, err := dynamic.NewForConfig(&rest.Config{Host: l.URL, BearerToken: l.AdminToken, TLSClientConfig: rest.TLSClientConfig{CAData: l.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "agentkernel.io/v1alpha1", "kind": "AgentSandbox",
		"metadata": map[string]any{"name": "crd1"}, "spec": map[string]any{"image": "alpine", "securityProfile": "restrictive"}}}
	if _, err := dc.Resource(kube.SandboxResource).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, errs, code := run(t, "controller", "--once", "--config", cfg)
	if code != 0 || out != "created crd1\n" {
		t.Fatalf("controller pass: %d %q %q", code, out, errs)
	}
	out, _, _ = run(t, "sandbox", "list", "--config", cfg)
	if !strings.Contains(out, "crd1") || !strings.Contains(out, "restrictive") {
		t.Errorf("list after reconcile: %q", out)
	}
	out, _, code = run(t, "crds", "print")
	if code != 0 || !json.Valid([]byte(out)) || !strings.Contains(out, "agentsandboxes.agentkernel.io") {
		t.Errorf("crds print: %d %.100s", code, out)
	}
}

// TestRunPending: a pod no node starts (none runs on this API server)
// ends `run` within its --start-timeout, with status 125 and one line
// naming the Pending pod, and leaves no sandbox behind; a zero timeout is
// refused.
func TestRunPending(t *testing.T) {
	cfg, _ := setup(t, shared.Get(t).AdminToken)
	start := time.Now()
	out, errs, code := run(t, "run", "-B", "kubernetes", "--config", cfg, "--image", "alpine:3.20", "--start-timeout", "2s", "--", "true")
	if code != 125 || out != "" || !strings.Contains(errs, "still Pending") || !strings.Contains(errs, "did not start") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Fatalf("run: %d %q %q", code, out, errs)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("run took %s with --start-timeout 2s", d)
	}
	if out, _, _ := run(t, "sandbox", "list", "--json", "--config", cfg); strings.TrimSpace(out) != "[]" {
		t.Errorf("run left a sandbox: %s", out)
	}
	if _, errs, code := run(t, "run", "--config", cfg, "--image", "alpine:3.20", "--start-timeout", "0s", "--", "true"); code != 125 || !strings.Contains(errs, "--start-timeout") {
		t.Errorf("zero timeout: %d %q", code, errs)
	}
}

// TestRunInterrupted: an interrupt (the context ending, as SIGINT does in
// MainOS) while `run` waits for its pod still removes the sandbox.
func TestRunInterrupted(t *testing.T) {
	cfg, _ := setup(t, shared.Get(t).AdminToken)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	start := time.Now()
	code := Main(ctx, []string{"run", "--config", cfg, "--image", "alpine:3.20", "--start-timeout", "5m", "--", "true"}, &out, &errb)
	if code == 0 || time.Since(start) > 30*time.Second {
		t.Fatalf("run: %d after %s: %q", code, time.Since(start), errb.String())
	}
	if out, _, _ := run(t, "sandbox", "list", "--json", "--config", cfg); strings.TrimSpace(out) != "[]" {
		t.Errorf("interrupted run left a sandbox: %s", out)
	}
}

package kubernetes

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agentkernel/agentkernel/internal/testenv/kubelab"
)

// The tests share one API server (kube-apiserver over etcd, started by
// TestMain): starting one takes seconds. Each test works in a namespace
// of its own. That cluster has no node: its pods stay Pending and nothing
// runs in them, so those tests check what the API stores and refuses.
// The TestNode tests (node_linux_test.go) run pods, on a second cluster
// with a node (kubelab.Shared.Node).
var shared kubelab.Shared

func TestMain(m *testing.M) { os.Exit(shared.RunTests(m)) }

func lab(t testing.TB) *kubelab.Lab {
	t.Helper()
	return shared.Get(t)
}

func restConfig(l *kubelab.Lab, token string) *rest.Config {
	return &rest.Config{Host: l.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: l.CAData}, QPS: 200, Burst: 400}
}

// admin is a clientset with every right, to look at what the backend made.
func admin(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(restConfig(lab(t), lab(t).AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

var nsSeq atomic.Int64

// namespace makes a fresh namespace with its default service account
// (which a controller manager would make; there is none here).
func namespace(t testing.TB) string {
	t.Helper()
	cs := admin(t)
	ns := fmt.Sprintf("t%d-%d", time.Now().UnixNano()%1e6, nsSeq.Add(1))
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// backend is a Backend as the administrator in a fresh namespace.
func backend(t testing.TB, o Options) *Backend {
	t.Helper()
	l := lab(t)
	if o.Namespace == "" {
		o.Namespace = namespace(t)
	}
	b, err := NewForConfig(restConfig(l, l.AdminToken), o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// countingConfig counts the HTTP requests a client makes.
func countingConfig(cfg *rest.Config, n *atomic.Int64) *rest.Config {
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			n.Add(1)
			return rt.RoundTrip(r)
		})
	}
	return cfg
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// managedObjects counts our pods and policies left in ns.
func managedObjects(t testing.TB, ns string) (pods, policies int) {
	t.Helper()
	cs := admin(t)
	sel := metav1.ListOptions{LabelSelector: ManagedLabel + "=" + ManagedValue}
	pl, err := cs.CoreV1().Pods(ns).List(context.Background(), sel)
	if err != nil {
		t.Fatal(err)
	}
	nl, err := cs.NetworkingV1().NetworkPolicies(ns).List(context.Background(), sel)
	if err != nil {
		t.Fatal(err)
	}
	return len(pl.Items), len(nl.Items)
}

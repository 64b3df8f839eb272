//go:build linux

package kubelab

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentkernel/agentkernel/internal/image/imagetest"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestNodeRunsPod starts an API server and a node, runs a pod on it
// until it is Running, and checks that Close leaves no cgroup, bridge or
// mount behind.
func TestNodeRunsPod(t *testing.T) {
	bin, ok := Dir()
	if !ok {
		testenv.Missing(t, "%s", MissingHint)
	}
	if m := NodeReady(bin); len(m) > 0 {
		testenv.Missing(t, "missing %s: %s", strings.Join(m, ", "), NodeMissingHint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	l, err := Start(ctx, bin, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ndir, err := os.MkdirTemp("", "kln-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(ndir)
	n, err := l.StartNode(ctx, bin, ndir, map[string]v1.Image{PauseImage: PauseImageFor(t), TestImage: imagetest.BusyboxImage(t)})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			n.Close()
		}
	}()
	// The default service account (no controller manager makes it),
	// then the pod.
	for _, o := range []struct{ path, body string }{
		{"serviceaccounts", `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default"}}`},
		{"pods", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"automountServiceAccountToken":false,
"containers":[{"name":"c","image":"` + TestImage + `","command":["sleep","infinity"]}]}}`},
	} {
		req, _ := http.NewRequestWithContext(ctx, "POST", l.URL+"/api/v1/namespaces/default/"+o.path, bytes.NewReader([]byte(o.body)))
		req.Header.Set("Authorization", "Bearer "+l.AdminToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := l.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Fatalf("create %s: %s %s", o.path, resp.Status, b)
		}
	}
	var phase string
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		req, _ := http.NewRequestWithContext(ctx, "GET", l.URL+"/api/v1/namespaces/default/pods/p", nil)
		req.Header.Set("Authorization", "Bearer "+l.AdminToken)
		resp, err := l.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Spec   struct{ NodeName string }
			Status struct{ Phase string }
		}
		_ = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		phase = p.Status.Phase
		if phase == "Running" {
			if p.Spec.NodeName != NodeName {
				t.Errorf("pod on node %q", p.Spec.NodeName)
			}
			break
		}
	}
	if phase != "Running" {
		t.Fatalf("pod is %q, not Running\nkubelet: %s\ncontainerd: %s\nscheduler: %s", phase, n.Log("kubelet.log"), n.Log("containerd.log"), n.Log("scheduler.log"))
	}
	n.Close()
	closed = true
	if left := n.Leftovers(); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

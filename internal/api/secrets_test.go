package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestSecretsNeverPooled: a spec with secrets never takes (or leaves) a
// warm sandbox: the pool's key does not hold them, and a pooled sandbox
// was built without them.
func TestSecretsNeverPooled(t *testing.T) {
	spec := &sandbox.Spec{Image: "alpine:3.20", Args: []string{"true"}, Network: sandbox.Network{Mode: sandbox.NetworkFull}}
	if !poolable(spec) {
		t.Fatal("the plain spec is not poolable: the test checks nothing")
	}
	spec.Secrets = &sandbox.Secrets{Bindings: []sandbox.SecretBinding{{Key: "K", Host: "api.example.test", Value: []byte("v")}}}
	if poolable(spec) {
		t.Error("a spec with secrets is poolable")
	}
}

// TestSecretsPassedAndRefused: /run hands "secrets" to the resolver as
// given; POST /sandboxes refuses them (400) before resolving anything;
// a resolver's error is a 400.
func TestSecretsPassedAndRefused(t *testing.T) {
	var got []string
	resolved := 0
	s := New(Options{Manager: sandbox.NewManager(sandbox.ManagerOptions{}), InsecureNoAuth: true,
		Resolve: func(_ context.Context, r RunSpec) (*sandbox.Spec, error) {
			resolved++
			got = r.Secrets
			return nil, errTest
		}})
	code, body := do(s, "POST", "/run", `{"command":["true"],"secrets":["K:api.example.test","V=hunter2:api.example.test"]}`)
	if code != http.StatusBadRequest || strings.Join(got, " ") != "K:api.example.test V=hunter2:api.example.test" {
		t.Errorf("/run: %d %v, secrets %q", code, body, got)
	}
	resolved = 0
	code, body = do(s, "POST", "/sandboxes", `{"name":"box","secrets":["V=hunter2:api.example.test"]}`)
	if code != http.StatusBadRequest || resolved != 0 || !strings.Contains(body["error"].(string), "POST /run") || strings.Contains(body["error"].(string), "hunter2") {
		t.Errorf("POST /sandboxes with secrets: %d %v (resolved %d times)", code, body, resolved)
	}
	code, _ = do(s, "POST", "/run", `{"command":["true"],"secrets":[`+strings.Repeat(`"K:a.test",`, 33)+`"K:a.test"]}`)
	if code != http.StatusBadRequest {
		t.Errorf("34 bindings: %d", code)
	}
}

var errTest = errors.New("refused by the test resolver")

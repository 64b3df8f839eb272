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
	spec.Secrets = nil
	spec.SecretBindings = &sandbox.SecretBindings{Bindings: []sandbox.SecretRef{{Key: "K", Host: "api.example.test"}}}
	if poolable(spec) {
		t.Error("a spec with recorded secret bindings is poolable")
	}
}

// TestSecretsPassedAndRefused: /run and POST /sandboxes hand "secrets"
// to the resolver as given (the sandbox's with its name); a resolver's
// error is a 400; more than 32 bindings are refused before resolving.
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
	resolved, got = 0, nil
	code, body = do(s, "POST", "/sandboxes", `{"name":"box","secrets":["K:api.example.test:x-api-key"]}`)
	if code != http.StatusBadRequest || resolved != 1 || strings.Join(got, " ") != "K:api.example.test:x-api-key" {
		t.Errorf("POST /sandboxes with secrets: %d %v (resolved %d times, secrets %q)", code, body, resolved, got)
	}
	resolved = 0
	many := `"secrets":[` + strings.Repeat(`"K:a.test",`, 33) + `"K:a.test"]}`
	for path, body := range map[string]string{"/run": `{"command":["true"],` + many, "/sandboxes": `{"name":"box",` + many} {
		code, _ = do(s, "POST", path, body)
		if code != http.StatusBadRequest || resolved != 0 {
			t.Errorf("%s, 34 bindings: %d, resolved %d times", path, code, resolved)
		}
	}
}

var errTest = errors.New("refused by the test resolver")

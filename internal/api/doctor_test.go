package api

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestDoctorRoute: GET /doctor answers the Doctor hook's report in the
// envelope, behind the key; other methods and a server without a doctor
// are the JSON 404.
func TestDoctorRoute(t *testing.T) {
	calls := 0
	s := New(Options{
		Manager: sandbox.NewManager(sandbox.ManagerOptions{}),
		Resolve: func(context.Context, RunSpec) (*sandbox.Spec, error) { return nil, errors.New("refused") },
		Keys:    []string{"k"},
		Doctor: func(*http.Request) any {
			calls++
			return map[string]any{"checks": []map[string]string{{"name": "backend", "status": "ok", "message": "native"}}, "healthy": true}
		},
	})
	if code, env := do(s, "GET", "/doctor", ""); code != 401 || env["success"] != false {
		t.Errorf("no key: %d %v", code, env)
	}
	if calls != 0 {
		t.Fatalf("the doctor ran for a request without a key")
	}
	code, env := do(s, "GET", "/doctor", "", "Authorization", "Bearer k")
	data, _ := env["data"].(map[string]any)
	if code != 200 || env["success"] != true || data["healthy"] != true || calls != 1 {
		t.Errorf("doctor: %d %v", code, env)
	}
	if code, _ := do(s, "POST", "/doctor", "{}", "Authorization", "Bearer k"); code != 404 || calls != 1 {
		t.Errorf("POST /doctor: %d", code)
	}
	if code, env := do(testServer(), "GET", "/doctor", ""); code != 404 || env["error"] != "Not found" {
		t.Errorf("no doctor: %d %v", code, env)
	}
}

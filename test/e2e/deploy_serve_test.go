//go:build linux

package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestServeAsDeployed: serve as deploy/helm and deploy/nomad run it: the
// API key in $AGENTKERNEL_API_KEY (where the Secret or the Nomad variable
// puts it), --allowed-host for the Service's name. /health answers
// without the key (the probes and the Nomad check send none), /metrics
// only with it, and the Service's name is a Host it answers.
func TestServeAsDeployed(t *testing.T) {
	a := newAK(t)
	const key = "deploy-test-key-5b1f0c"
	a.env = append(a.env, "AGENTKERNEL_API_KEY="+key)
	s := startServe(t, a, "listening on ", "serve", "--host", "127.0.0.1", "--port", "0", "--allowed-host", "ak.agentkernel-system.svc")
	get := func(path, host, key string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", s.url+path, nil)
		if host != "" {
			req.Host = host
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get("/health", "", ""); code != 200 {
		t.Errorf("/health without a key: %d %s", code, body)
	}
	if code, body := get("/health", "ak.agentkernel-system.svc:18888", ""); code != 200 {
		t.Errorf("/health through the Service's name: %d %s", code, body)
	}
	if code, _ := get("/health", "elsewhere.example:18888", ""); code != 403 {
		t.Errorf("/health with a Host not allowed: %d, want 403", code)
	}
	if code, _ := get("/metrics", "", ""); code != 401 {
		t.Errorf("/metrics without a key: %d, want 401", code)
	}
	if code, _ := get("/metrics", "", "wrong"); code != 401 {
		t.Errorf("/metrics with a wrong key: %d, want 401", code)
	}
	code, body := get("/metrics", "ak.agentkernel-system.svc", key)
	if code != 200 || !strings.Contains(body, "# TYPE agentkernel_") {
		t.Errorf("/metrics with the key: %d %.300s", code, body)
	}
}

//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAPISecrets: the HTTP API's "secrets" on POST /run, through a real
// serve (on a unix socket, in the lab's client namespace) against a real
// HTTPS upstream: the upstream receives the vault's value and the
// inline one, the sandbox sees placeholders only, the answer holds no
// value. The [secrets] bindings of the serving user's own configuration
// apply to API runs and to sandboxes made by POST /sandboxes, whose
// "secrets" bind vault keys for the sandbox's execs. Bad bindings are
// 400s that name the problem but never a value (an inline value for a
// persistent sandbox among them).
func TestAPISecrets(t *testing.T) {
	n := newNetEnv(t)
	up := newSecretUpstream(t, n.lab)
	n.a.env = append(n.a.env, "SSL_CERT_FILE="+up.caFile)
	const vaultValue = "api-vault-token-0123456789"
	n.a.stdin = vaultValue
	if r := n.a.run("secret", "set", "VKEY"); r.code != 0 {
		t.Fatalf("secret set: %v", r)
	}
	const cfgValue = "api-config-token-31415926"
	n.a.stdin = cfgValue
	if r := n.a.run("secret", "set", "CKEY"); r.code != 0 {
		t.Fatalf("secret set: %v", r)
	}
	n.a.stdin = ""
	const inline = "api-inline-value-42"
	// The serving user's own configuration binds CKEY.
	cfgDir := filepath.Join(n.a.home, ".config", "agentkernel")
	if err := os.MkdirAll(cfgDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "config.toml"), []byte("[secrets]\nCKEY = { host = \""+upstreamName+"\" }\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	sock := filepath.Join(t.TempDir(), "api.sock")
	c := n.a.cmd(context.Background(), "serve", "--unix", sock)
	stderr, _ := c.StderrPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	log := &lockedBuf{}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			log.Write([]byte(sc.Text() + "\n"))
			if !once && strings.Contains(sc.Text(), "serving unix socket") {
				once = true
				close(ready)
			}
		}
	}()
	t.Cleanup(func() {
		c.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			c.Process.Kill()
		}
	})
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		t.Fatalf("serve did not start:\n%s", log.String())
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	post := func(path string, body any) (int, string, string) {
		t.Helper()
		b, _ := json.Marshal(body)
		resp, err := hc.Post("http://localhost"+path, "application/json", strings.NewReader(string(b)))
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var env struct {
			Data struct {
				Output string `json:"output"`
			} `json:"data"`
		}
		json.Unmarshal(raw, &env)
		return resp.StatusCode, env.Data.Output, string(raw)
	}

	script := `printf 'KEY=%s VKEY=%s\n' "$KEY" "$VKEY"
curl -fsS -H "Authorization: Bearer $KEY" https://` + upstreamName + `/api-inline || echo "curl failed"
curl -fsS -H "X-Api-Key: $VKEY" https://` + upstreamName + `/api-vault || echo "vault curl failed"`
	status, out, raw := post("/run", map[string]any{
		"command": []string{"sh", "-c", script}, "image": "host", "fast": false,
		"network": "filtered", "allow_domains": []string{upstreamName},
		"secrets": []string{"KEY=" + inline + ":" + upstreamName, "VKEY:" + upstreamName + ":x-api-key"},
	})
	if status != http.StatusOK {
		t.Fatalf("POST /run with secrets: %d %s\nserve: %s", status, raw, log.String())
	}
	for _, want := range []string{"KEY=ak-proxy-managed VKEY=ak-proxy-managed", "upstream ok /api-inline", "upstream ok /api-vault"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the run's output:\n%s", want, out)
		}
	}
	if strings.Contains(raw, inline) || strings.Contains(raw, vaultValue) {
		t.Errorf("a value is in the answer: %s", raw)
	}
	got := map[string]upstreamRequest{}
	for _, q := range up.requests() {
		got[q.path] = q
	}
	if got["/api-inline"].auth != "Bearer "+inline || got["/api-vault"].apiKey != vaultValue {
		t.Errorf("upstream saw %+v, want the inline value and the vault's", got)
	}

	// A run that names no secret gets the configuration's binding.
	status, out, raw = post("/run", map[string]any{
		"command": []string{"sh", "-c", `echo "CKEY=$CKEY"; curl -fsS -H "Authorization: Bearer $CKEY" https://` + upstreamName + `/api-config`},
		"image":   "host", "fast": false, "network": "filtered", "allow_domains": []string{upstreamName},
	})
	if status != http.StatusOK || !strings.Contains(out, "CKEY=ak-proxy-managed\nupstream ok /api-config") {
		t.Errorf("POST /run with the configuration's binding: %d %s", status, raw)
	}

	// A persistent sandbox: its "secrets" and the configuration's, for
	// every exec.
	status, _, raw = post("/sandboxes", map[string]any{"name": "apisec", "image": "host", "network": "filtered",
		"allow_domains": []string{upstreamName}, "secrets": []string{"VKEY:" + upstreamName + ":x-api-key"}})
	if status != http.StatusCreated {
		t.Fatalf("POST /sandboxes with secrets: %d %s\nserve: %s", status, raw, log.String())
	}
	t.Cleanup(func() { n.a.run("sandbox", "rm", "--force", "apisec") })
	status, out, raw = post("/sandboxes/apisec/exec", map[string]any{"command": []string{"sh", "-c",
		`echo "VKEY=$VKEY CKEY=$CKEY"; curl -fsS -H "X-Api-Key: $VKEY" -H "Authorization: Bearer $CKEY" https://` + upstreamName + `/api-box`}})
	if status != http.StatusOK || !strings.Contains(out, "VKEY=ak-proxy-managed CKEY=ak-proxy-managed\nupstream ok /api-box") {
		t.Errorf("exec in the API's sandbox: %d %s", status, raw)
	}
	got = map[string]upstreamRequest{}
	for _, q := range up.requests() {
		got[q.path] = q
	}
	if got["/api-config"].auth != "Bearer "+cfgValue {
		t.Errorf("upstream /api-config: Authorization %q, want the configuration's secret", got["/api-config"].auth)
	}
	if q := got["/api-box"]; q.apiKey != vaultValue || q.auth != "Bearer "+cfgValue {
		t.Errorf("upstream /api-box: X-Api-Key %q, Authorization %q: want the bound key's value and the configuration's", q.apiKey, q.auth)
	}

	// Refusals: 400, the reason named, no value echoed, nothing run.
	before := len(up.requests())
	for _, c := range []struct {
		path string
		body map[string]any
		why  string
	}{
		{"/run", map[string]any{"command": []string{"true"}, "network": "full", "secrets": []string{"NOPE:" + upstreamName}}, "secret 'NOPE' is not in the vault"},
		{"/run", map[string]any{"command": []string{"true"}, "network": "full", "secrets": []string{"KEY=" + inline + ":https://x.test/"}}, "not a host name"},
		{"/run", map[string]any{"command": []string{"true"}, "network": "none", "secrets": []string{"KEY=" + inline + ":" + upstreamName}}, "needs network egress"},
		{"/run", map[string]any{"command": []string{"true"}, "network": "filtered", "allow_domains": []string{"other.test"}, "secrets": []string{"VKEY:" + upstreamName}}, "not allowed by the filtered network policy"},
		{"/run", map[string]any{"command": []string{"true"}, "network": "full", "secrets": "KEY=" + inline + ":" + upstreamName}, "Invalid JSON"},
		{"/sandboxes", map[string]any{"name": "withsecrets", "image": "host", "network": "full", "secrets": []string{"KEY=" + inline + ":" + upstreamName}}, "takes no inline value"},
		{"/sandboxes", map[string]any{"name": "withsecrets", "image": "host", "network": "full", "secrets": []string{"NOPE:" + upstreamName}}, "secret 'NOPE' is not in the vault"},
		{"/sandboxes", map[string]any{"name": "withsecrets", "image": "host", "network": "none", "secrets": []string{"VKEY:" + upstreamName}}, "needs network egress"},
	} {
		status, _, raw := post(c.path, c.body)
		if status != http.StatusBadRequest || !strings.Contains(raw, c.why) {
			t.Errorf("POST %s %v: %d %s, want 400 saying %q", c.path, c.body["secrets"], status, raw, c.why)
		}
		if strings.Contains(raw, inline) || strings.Contains(raw, vaultValue) {
			t.Errorf("POST %s: a value is in the answer: %s", c.path, raw)
		}
	}
	if len(up.requests()) != before {
		t.Errorf("a refused request reached the upstream")
	}
	if r := n.a.run("sandbox", "info", "withsecrets"); r.code == 0 {
		t.Errorf("a refused POST /sandboxes made a sandbox: %v", r)
	}
	if strings.Contains(log.String(), inline) || strings.Contains(log.String(), vaultValue) {
		t.Errorf("serve logged a value:\n%s", log.String())
	}
}

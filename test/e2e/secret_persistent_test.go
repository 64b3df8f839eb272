//go:build linux

package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/testenv/netlab"
)

// secretCAFile is the CA a persistent sandbox with secrets keeps in its
// directory on the host (sandbox.SecretCAFile).
const secretCAFile = "secret-ca.pem"

// caCertOf is the certificate block of a CA file (PEM, first block).
func caCertOf(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the sandbox's CA: %v", err)
	}
	s := string(b)
	i := strings.Index(s, "-----END CERTIFICATE-----")
	if !strings.HasPrefix(s, "-----BEGIN CERTIFICATE-----") || i < 0 || !strings.Contains(s, "PRIVATE KEY") {
		t.Fatalf("%s holds no certificate and key", path)
	}
	return s[:i+len("-----END CERTIFICATE-----")] + "\n"
}

// lastCert is the last certificate of a bundle (PEM): the sandbox's CA,
// which its trust store appends to the image's bundle.
func lastCert(bundle string) string {
	i := strings.LastIndex(bundle, "-----BEGIN CERTIFICATE-----")
	if i < 0 {
		return ""
	}
	return strings.TrimRight(bundle[i:], "\n") + "\n"
}

// noValueOnDisk fails when any regular file under root holds value.
func noValueOnDisk(t *testing.T, root, value string) {
	t.Helper()
	_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(value)) {
				t.Errorf("%s holds the secret's value in clear", p)
			}
		}
		return nil
	})
}

// TestSecretPersistentSandbox: sandbox create -S against a real HTTPS
// upstream. Every exec sees the placeholder and curl's request arrives
// with the vault's value; the value is in no process's environment and
// no file inside, nor in clear in any file of the data directory; the
// sandbox's CA (whose certificate is what the sandbox trusts) stays in
// its directory on the host, 0600, the same across a stop and start and
// across a kill -9 of the supervisor, after which the binding still
// works. A key deleted from the vault while the sandbox is stopped fails
// its start, named; bad bindings at create (a key not in the vault, an
// inline value) exit 125 and create nothing.
func TestSecretPersistentSandbox(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("persistent sandboxes need the exec stub (amd64)")
	}
	n := newNetEnv(t)
	up := newSecretUpstream(t, n.lab)
	a := n.a
	a.env = append(a.env, "SSL_CERT_FILE="+up.caFile)
	const value = "persistent-token-5551234"
	a.stdin = value
	a.must("secret", "set", "PKEY")
	a.stdin = ""

	net := []string{"--image", "host", "-e", "HOME=/tmp", "--network", "filtered", "--allow-domain", upstreamName}
	// Refused at create, and nothing made.
	for _, c := range []struct {
		bind, want string
	}{
		{"NOPE:" + upstreamName, "secret 'NOPE' is not in the vault"},
		{"PKEY=inline-value-77:" + upstreamName, "takes no inline value"},
		{"PKEY:" + upstreamName + ":bad header", "is not a header name"},
	} {
		r := a.run(append(append([]string{"sandbox", "create", "refused"}, net...), "-S", c.bind, "--start")...)
		if r.code != 125 || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "inline-value-77") {
			t.Errorf("create -S %s: want exit 125 saying %q: %v", c.bind, c.want, r)
		}
	}
	if r := a.run("sandbox", "info", "refused"); r.code == 0 {
		t.Errorf("a refused create left a sandbox: %v", r)
	}
	if _, err := os.Stat(filepath.Join(a.dataDir, "sandboxes", "refused")); err == nil {
		t.Error("a refused create left a sandbox directory")
	}

	// A project's agentkernel.toml cannot bind a vault key (HKEY, which
	// the vault holds) to a sandbox.
	a.stdin = "project-must-not-bind-this"
	a.must("secret", "set", "HKEY")
	a.stdin = ""
	if err := os.WriteFile(filepath.Join(a.dir, "agentkernel.toml"), []byte("[secrets]\nHKEY = { host = \""+upstreamName+"\", header = \"x-api-key\" }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := a.must(append(append([]string{"sandbox", "create", "psec"}, net...), "-S", "PKEY:"+upstreamName, "--start")...)
	if !strings.Contains(r.stderr, `ignoring [secrets] binding "HKEY"`) {
		t.Errorf("create with a project file binding a secret: no warning: %v", r)
	}
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "psec") })
	dir := filepath.Join(a.dataDir, "sandboxes", "psec")

	// check execs curl with the placeholder to path; the upstream must
	// see the value, and the value must be nowhere inside (a control
	// token planted the same way is found, so the search can fail). It
	// returns the CA certificate the sandbox trusts.
	check := func(path string) string {
		t.Helper()
		r := a.run("exec", "psec", "--", "sh", "-c", `
printf 'PKEY=%s HKEY=[%s]\n' "$PKEY" "${HKEY-}"
curl -fsS --max-time 10 -H "Authorization: Bearer $PKEY" -H "X-Api-Key: ${HKEY:-none}" https://`+upstreamName+path+` || echo "curl failed"
control="ctl""-token-43"
printf '%s\n' "$control" > /tmp/control
for needle in "$control" "persistent-token""-5551234"; do
	hits=$( (for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f"; done 2>/dev/null; grep -rsahF -- "$needle" /tmp /run /workspace /etc /home /root /var 2>/dev/null) | grep -caF -- "$needle")
	echo "needle ${#needle} hits $hits"
done
rm -f /tmp/control
echo "--- ca"
cat "$SSL_CERT_FILE"`)
		out, ca, _ := strings.Cut(r.stdout, "--- ca\n")
		ca = lastCert(ca)
		for _, want := range []string{"PKEY=ak-proxy-managed HKEY=[]\n", "upstream ok " + path, "needle 12 hits 1", "needle 24 hits 0"} {
			if !strings.Contains(out, want) {
				t.Errorf("exec %s: no %q in\n%s\n%v", path, want, out, r)
			}
		}
		if strings.Contains(r.stdout, value) || strings.Contains(r.stderr, value) {
			t.Errorf("exec %s: the value reached the sandbox's output: %v", path, r)
		}
		var seen *upstreamRequest
		for _, q := range up.requests() {
			if q.path == path {
				q := q
				seen = &q
			}
		}
		if seen == nil {
			t.Errorf("exec %s: the request did not reach the upstream", path)
		} else if seen.auth != "Bearer "+value || seen.apiKey != "none" {
			t.Errorf("exec %s: upstream got Authorization %q and X-Api-Key %q, want the vault's value and no other", path, seen.auth, seen.apiKey)
		}
		return ca
	}
	ca1 := check("/first")

	// The CA: on the host, in the sandbox's directory, the user's alone;
	// its certificate is what the sandbox trusts (the end of its bundle),
	// and its key is not inside.
	fi, err := os.Stat(filepath.Join(dir, secretCAFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the sandbox's CA file: %v %v", fi, err)
	}
	if host := caCertOf(t, filepath.Join(dir, secretCAFile)); host != ca1 {
		t.Errorf("the CA the sandbox trusts is not its helper's:\ninside:\n%s\nhost:\n%s", ca1, host)
	}
	if r := a.run("exec", "psec", "--", "sh", "-c", "grep -rlsF 'PRIVATE KEY' /etc/agentkernel /etc/ssl /tmp /run /root 2>/dev/null || echo 'no key'"); r.stdout != "no key\n" {
		t.Errorf("a private key inside: %v", r)
	}

	// Stop and start: the same binding, the same CA. The stop records
	// what was injected (names, never the value).
	a.must("sandbox", "stop", "psec")
	if log, _ := os.ReadFile(filepath.Join(a.dataDir, "audit.jsonl")); !bytes.Contains(log, []byte(`"sandbox":"psec","action":"secret_injected"`)) || !bytes.Contains(log, []byte("secret PKEY for "+upstreamName)) {
		t.Errorf("the audit log lacks the sandbox's injections:\n%s", log)
	}
	a.must("sandbox", "start", "psec")
	if ca := check("/restarted"); ca != ca1 {
		t.Errorf("the CA changed across a restart")
	}

	// kill -9 of the supervisor, then start.
	sup := a.info("psec").SupervisorPID
	if sup <= 0 {
		t.Fatalf("no supervisor pid: %+v", a.info("psec"))
	}
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.info("psec").Status != "stopped" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	a.must("sandbox", "start", "psec")
	if ca := check("/after-kill"); ca != ca1 {
		t.Errorf("the CA changed across a kill -9 of the supervisor")
	}

	// A key deleted while the sandbox is stopped: its start fails, named;
	// stored again, the sandbox starts and injects it.
	a.must("sandbox", "stop", "psec")
	a.must("secret", "delete", "PKEY")
	if r := a.run("sandbox", "start", "psec"); r.code == 0 || !strings.Contains(r.stderr, "'PKEY'") || !strings.Contains(r.stderr, "not in the vault") {
		t.Errorf("start with the key deleted: %v", r)
	}
	if i := a.info("psec"); i.Status != "stopped" {
		t.Errorf("after a refused start: %+v", i)
	}
	a.stdin = value
	a.must("secret", "set", "PKEY")
	a.stdin = ""
	a.must("sandbox", "start", "psec")
	check("/stored-again")

	// The sandbox's record names the binding, never the value.
	if r := a.run("sandbox", "info", "psec", "--json"); strings.Contains(r.stdout, value) {
		t.Errorf("sandbox info shows the value: %v", r)
	}
	noValueOnDisk(t, a.dataDir, value)
}

// secretGoClient GETs its first argument with net/http, sending
// "Authorization: Bearer $<second argument>", and prints the body: a
// static client for images without curl.
const secretGoClient = `package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	req, err := http.NewRequest("GET", os.Args[1], nil)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Authorization", "Bearer "+os.Getenv(os.Args[2]))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println("request failed:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Print(string(b))
}
`

// TestSecretSnapshotRestore: a snapshot of a sandbox with secrets,
// restored under a new name, binds the same vault key: the restored
// sandbox's requests arrive with the value; it has a CA of its own (made
// at its first start, kept in its own directory), which is the one its
// trust store holds; no snapshot file holds a CA's key or the value.
func TestSecretSnapshotRestore(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("persistent sandboxes need the exec stub (amd64)")
	}
	a, ref := withRegistry(t)
	a.must("run", "--image", ref, "--", "true")
	lab := netlab.New(t)
	a.wrap = labWrap(lab.ClientNS())
	up := newSecretUpstream(t, lab)
	a.env = append(a.env, "SSL_CERT_FILE="+up.caFile)
	const value = "snapshot-token-9876543"
	a.stdin = value
	a.must("secret", "set", "SKEY")
	a.stdin = ""

	cdir := t.TempDir()
	if err := os.WriteFile(filepath.Join(cdir, "main.go"), []byte(secretGoClient), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cdir, "go.mod"), []byte("module secretclient\n\ngo 1.21\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(cdir, "get"), ".")
	build.Dir = cdir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the client: %v\n%s", err, out)
	}

	a.must("sandbox", "create", "snsec", "--image", ref, "--pull", "never", "--network", "filtered", "--allow-domain", upstreamName,
		"-v", filepath.Join(cdir, "get")+":/usr/local/bin/get:ro", "-S", "SKEY:"+upstreamName, "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "snsec") })
	get := func(name, path string) string {
		t.Helper()
		r := a.run("exec", name, "--", "sh", "-c", `echo "SKEY=$SKEY"; get https://`+upstreamName+path+` SKEY; echo "--- ca"; cat "$SSL_CERT_FILE"`)
		out, ca, _ := strings.Cut(r.stdout, "--- ca\n")
		ca = lastCert(ca)
		if !strings.Contains(out, "SKEY=ak-proxy-managed\nupstream ok "+path) || strings.Contains(r.stdout, value) {
			t.Errorf("%s: %v", name, r)
		}
		found := false
		for _, q := range up.requests() {
			if q.path == path {
				found = true
				if q.auth != "Bearer "+value {
					t.Errorf("%s: upstream got Authorization %q", name, q.auth)
				}
			}
		}
		if !found {
			t.Errorf("%s: the request did not reach the upstream", name)
		}
		return ca
	}
	srcCA := get("snsec", "/source")
	a.must("snapshot", "take", "snsec", "--name", "secsnap")
	a.must("snapshot", "restore", "secsnap", "--as", "snrest")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "snrest") })
	a.must("sandbox", "start", "snrest")
	restCA := get("snrest", "/restored")

	restFile := filepath.Join(a.dataDir, "sandboxes", "snrest", secretCAFile)
	if host := caCertOf(t, restFile); host != restCA {
		t.Errorf("the restored sandbox trusts another CA than its helper's:\ninside:\n%s\nhost:\n%s", restCA, host)
	}
	if restCA == srcCA {
		t.Errorf("the restored sandbox shares the source's CA")
	}
	if fi, err := os.Stat(restFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the restored sandbox's CA file: %v %v", fi, err)
	}
	_ = filepath.Walk(filepath.Join(a.dataDir, "snapshots"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("PRIVATE KEY")) {
				t.Errorf("snapshot file %s holds a private key", p)
			}
		}
		return nil
	})
	// The source goes on working after the take.
	get("snsec", "/source-after")
	noValueOnDisk(t, a.dataDir, value)
}

// TestMCPServerSecrets: the MCP server applies the [secrets] bindings of
// its own user's configuration to sandbox_run and to the sandboxes
// sandbox_create makes (the agent names no secret: no tool takes one);
// inside, the agent's command sees the placeholder and the upstream the
// vault's value.
func TestMCPServerSecrets(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("persistent sandboxes need the exec stub (amd64)")
	}
	n := newNetEnv(t)
	up := newSecretUpstream(t, n.lab)
	a := n.a
	a.env = append(a.env, "SSL_CERT_FILE="+up.caFile)
	const value = "mcp-config-token-2718281"
	a.stdin = value
	a.must("secret", "set", "MKEY")
	a.stdin = ""
	cfgDir := filepath.Join(a.home, ".config", "agentkernel")
	if err := os.MkdirAll(cfgDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := "[security]\nnetwork = \"filtered\"\n\n[security.domains]\nallow = [\"" + upstreamName + "\"]\n\n[secrets]\nMKEY = { host = \"" + upstreamName + "\" }\n"
	if err := os.WriteFile(filepath.Join(cfgDir, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := mcpSession(t, a, nil)
	curl := func(path string) []string {
		return []string{"sh", "-c", `echo "MKEY=$MKEY"; curl -fsS --max-time 10 -H "Authorization: Bearer $MKEY" https://` + upstreamName + path}
	}
	if out := mustCall(t, s, "sandbox_run", map[string]any{"command": curl("/mcp-run"), "image": "host"}); !strings.Contains(out, "MKEY=ak-proxy-managed\nupstream ok /mcp-run") {
		t.Errorf("sandbox_run: %q", out)
	}
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "mcpsec") })
	if out := mustCall(t, s, "sandbox_create", map[string]any{"name": "mcpsec", "image": "host"}); !strings.Contains(out, "created and started") {
		t.Fatalf("sandbox_create: %q", out)
	}
	if out := mustCall(t, s, "sandbox_exec", map[string]any{"name": "mcpsec", "command": curl("/mcp-box")}); !strings.Contains(out, "MKEY=ak-proxy-managed\nupstream ok /mcp-box") || strings.Contains(out, value) {
		t.Errorf("sandbox_exec: %q", out)
	}
	got := map[string]string{}
	for _, q := range up.requests() {
		got[q.path] = q.auth
	}
	for _, p := range []string{"/mcp-run", "/mcp-box"} {
		if got[p] != "Bearer "+value {
			t.Errorf("upstream %s: Authorization %q, want the configuration's secret", p, got[p])
		}
	}
}

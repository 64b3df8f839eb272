//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// httpsClient is a static HTTPS client for images without one that
// verifies certificates: it sends GET url with the header name: value
// of its arguments (value read from the variable named), verified
// against the trust store SSL_CERT_FILE names (Go's own rule), and
// prints the body.
const httpsClient = `package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	req, err := http.NewRequest("GET", os.Args[1], nil)
	if err != nil {
		fmt.Println("client failed:", err)
		os.Exit(1)
	}
	req.Header.Set(os.Args[2], os.Args[3]+os.Getenv(os.Args[4]))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println("client failed:", err)
		os.Exit(1)
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("status %d: %s", resp.StatusCode, b)
}
`

// buildHTTPSClient builds httpsClient into a directory of its own.
func buildHTTPSClient(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(httpsClient), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	c := exec.Command("go", "build", "-o", filepath.Join(out, "client"), "main.go")
	c.Dir = dir
	c.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off", "GOFLAGS=")
	if b, err := c.CombinedOutput(); err != nil {
		t.Fatalf("building the HTTPS client: %v: %s", err, b)
	}
	return out
}

// TestGVisorSecretInjection: run -B gvisor -S: the sandbox sees the
// placeholder in the bound variable and the run's CA in its trust
// store; a request to the bound host leaves with the value in its
// header (the network helper's injection), verified end to end against
// the upstream's own CA; the value is nowhere inside; the placeholder
// sent to a header no binding names is refused; --secret-file is
// refused saying so.
func TestGVisorSecretInjection(t *testing.T) {
	a, ref, lab := gvNetEnv(t)
	up := newSecretUpstream(t, lab)
	a.env = append(a.env, "SSL_CERT_FILE="+up.caFile)
	tools := buildHTTPSClient(t)
	const value = "gvisor-secret-0123456789"
	script := `
printf 'KEY=%s\n' "$KEY"
printf 'SSL_CERT_FILE=%s\n' "$SSL_CERT_FILE"
test -s /etc/agentkernel/ca.crt && echo "ca.crt present"
grep -c 'BEGIN CERTIFICATE' "$SSL_CERT_FILE" | sed 's/^/bundle certs /'
/tools/client https://` + upstreamName + `/gv Authorization "Bearer " KEY
/tools/client https://` + upstreamName + `/leak X-Other "" KEY
needle="gvisor-secret""-0123456789"
hits=$( (for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f"; done 2>/dev/null; grep -rsahF -- "$needle" /tmp /etc /root 2>/dev/null) | grep -caF -- "$needle")
echo "value hits $hits"
`
	r := a.gv(ref, []string{"--pull", "never", "-v", tools + ":/tools:ro", "--network", "filtered", "--allow-domain", upstreamName,
		"-S", "KEY=" + value + ":" + upstreamName}, "sh", "-c", script)
	t.Logf("inside the sandbox: %v", r)
	if r.code != 0 {
		t.Fatalf("run -B gvisor -S: %v", r)
	}
	for _, want := range []string{"KEY=ak-proxy-managed\n", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt\n", "ca.crt present\n",
		"status 200: upstream ok /gv\n", "value hits 0\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("want %q inside, got %q", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "upstream ok /leak") {
		t.Errorf("the placeholder sent where no secret goes was let through: %q", r.stdout)
	}
	var sawGV bool
	for _, q := range up.requests() {
		if strings.Contains(q.auth, "ak-proxy-managed") || q.path == "/leak" {
			t.Errorf("the upstream saw %+v", q)
		}
		if q.path == "/gv" {
			sawGV = q.auth == "Bearer "+value
			if !sawGV {
				t.Errorf("the upstream got /gv with Authorization %q", q.auth)
			}
		}
	}
	if !sawGV {
		t.Errorf("the upstream never got /gv: %+v", up.requests())
	}
	if r := a.gv(ref, []string{"--pull", "never", "--network", "filtered", "--allow-domain", upstreamName, "-S", "KEY=" + value + ":" + upstreamName}, "sh", "-c", "true"); r.code != 0 {
		t.Errorf("a second run: %v", r)
	}
	if r := a.gv(ref, []string{"--pull", "never", "--network", "none", "-S", "KEY=" + value + ":" + upstreamName}, "true"); r.code != 125 {
		t.Errorf("-S without egress: %v", r)
	}
}

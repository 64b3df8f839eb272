//go:build linux

package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/testenv/netlab"
)

// secretUpstream is an HTTPS server beyond the lab's internet, in a
// namespace of its own routed through the lab's inet namespace (the
// lab's servers own port 443 of every inet address), with a CA of its
// own that only the network helper is told to trust; it records the
// credentials each request arrived with. Under /git/ it is a git
// server (smart HTTP, one ref) to requests whose Authorization is
// gitAuth, and answers others 401.
type secretUpstream struct {
	caFile  string
	mu      sync.Mutex
	seen    []upstreamRequest
	gitAuth string
}

// gitCommit is the one commit the upstream's git repository advertises.
const gitCommit = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// gitAdvertisement is git's smart-HTTP answer to info/refs for
// git-upload-pack (protocol v0): HEAD and refs/heads/main at gitCommit.
func gitAdvertisement() string {
	pkt := func(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }
	return pkt("# service=git-upload-pack\n") + "0000" +
		pkt(gitCommit+" HEAD\x00symref=HEAD:refs/heads/main agent=git/test\n") +
		pkt(gitCommit+" refs/heads/main\n") + "0000"
}

type upstreamRequest struct {
	path, auth, apiKey string
}

const (
	upstreamName = "secret.test"
	upstreamAddr = "203.0.113.10"
	upstreamGW   = "203.0.113.1"
)

func (u *secretUpstream) requests() []upstreamRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]upstreamRequest(nil), u.seen...)
}

// wantAuth checks that a request for path reached u, its last one with
// Authorization auth; what names the case in the errors.
func (u *secretUpstream) wantAuth(t *testing.T, what, path, auth string) {
	t.Helper()
	var seen *upstreamRequest
	for _, q := range u.requests() {
		if q.path == path {
			q := q
			seen = &q
		}
	}
	if seen == nil {
		t.Errorf("%s: the request for %s did not reach the upstream", what, path)
	} else if seen.auth != auth {
		t.Errorf("%s: upstream got Authorization %q for %s, want the vault's value", what, seen.auth, path)
	}
}

func newSecretUpstream(t *testing.T, lab *netlab.Lab) *secretUpstream {
	t.Helper()
	ns := fmt.Sprintf("akup%d", os.Getpid())
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ip("-n", lab.InetNS(), "link", "add", "up0", "type", "veth", "peer", "name", "eth0", "netns", ns)
	ip("-n", lab.InetNS(), "addr", "add", upstreamGW+"/24", "dev", "up0")
	ip("-n", lab.InetNS(), "link", "set", "up0", "up")
	ip("-n", ns, "link", "set", "lo", "up")
	ip("-n", ns, "addr", "add", upstreamAddr+"/24", "dev", "eth0")
	ip("-n", ns, "link", "set", "eth0", "up")
	ip("-n", ns, "route", "add", "default", "via", upstreamGW)
	if err := lab.InInet(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	lab.AddName(upstreamName, upstreamAddr)

	// The upstream's own CA and certificate for upstreamName.
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "secret upstream test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: upstreamName},
		DNSNames: []string{upstreamName}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	u := &secretUpstream{caFile: filepath.Join(t.TempDir(), "upstream-ca.pem")}
	if err := os.WriteFile(u.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}

	// The listener is a socket of the upstream's namespace.
	lnc := make(chan net.Listener, 1)
	errc := make(chan error, 1)
	go func() {
		// The thread ends in the namespace (netlab.InNS).
		if err := netlab.InNS("/run/netns/"+ns, func() error {
			ln, err := net.Listen("tcp", upstreamAddr+":443")
			if err == nil {
				lnc <- ln
			}
			return err
		}); err != nil {
			errc <- err
		}
	}()
	var ln net.Listener
	select {
	case ln = <-lnc:
	case err := <-errc:
		t.Fatalf("upstream listener: %v", err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u.mu.Lock()
			u.seen = append(u.seen, upstreamRequest{path: r.URL.Path, auth: r.Header.Get("Authorization"), apiKey: r.Header.Get("X-Api-Key")})
			gitAuth := u.gitAuth
			u.mu.Unlock()
			if strings.HasPrefix(r.URL.Path, "/git/") {
				if gitAuth == "" || r.Header.Get("Authorization") != gitAuth {
					w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
					http.Error(w, "authorization required", http.StatusUnauthorized)
					return
				}
				if !strings.HasSuffix(r.URL.Path, "/info/refs") || r.URL.Query().Get("service") != "git-upload-pack" {
					http.NotFound(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
				w.Header().Set("Cache-Control", "no-cache")
				io.WriteString(w, gitAdvertisement())
				return
			}
			fmt.Fprintf(w, "upstream ok %s\n", r.URL.Path)
		}),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { srv.Close() })
	return u
}

// TestSecretInjection: run -S against a real HTTPS upstream. curl,
// Python's urllib, Node's fetch and git (ls-remote over smart HTTP, to a
// server that answers 401 without the real value) inside the sandbox
// send the placeholder and the upstream receives the real value (inline,
// and from the vault in a header of its own); OpenSSL reading only
// SSL_CERT_DIR (-CApath) trusts the injector, which the image's own
// directory does not, and the directory holds the image's certificates
// too; inside, $KEY is the placeholder and
// the value is nowhere in the processes' environments or the sandbox's
// writable files (a control token planted the same way is found, so the
// search can fail); the audit log names the secret and the host, never
// the value; bad bindings fail with 125 before anything runs.
func TestSecretInjection(t *testing.T) {
	n := newNetEnv(t)
	up := newSecretUpstream(t, n.lab)
	// The helper verifies upstream servers against the host's trust
	// store: here, the upstream's CA alone.
	n.a.env = append(n.a.env, "SSL_CERT_FILE="+up.caFile)

	const vaultValue = "vault-token-0123456789"
	n.a.stdin = vaultValue
	if r := n.a.run("secret", "set", "VKEY"); r.code != 0 {
		t.Fatalf("secret set: %v", r)
	}
	n.a.stdin = "badline1\nbadline2\n"
	if r := n.a.run("secret", "set", "BADV"); r.code != 0 {
		t.Fatalf("secret set: %v", r)
	}
	n.a.stdin = ""
	const inline = "secretvalue"
	up.mu.Lock()
	up.gitAuth = "Bearer " + inline
	up.mu.Unlock()

	script := `
set -u
printf 'KEY=%s VKEY=%s\n' "$KEY" "$VKEY"
printf 'SSL_CERT_FILE=%s\n' "$SSL_CERT_FILE"
test -s /etc/agentkernel/ca.crt 2>/dev/null && echo "ca.crt present" || echo "ca.crt absent"
curl -fsS -H "Authorization: Bearer $KEY" https://` + upstreamName + `/curl || echo "curl failed"
python3 -c 'import os, urllib.request as u; print(u.urlopen(u.Request("https://` + upstreamName + `/python", headers={"Authorization": "Bearer " + os.environ["KEY"]})).read().decode().strip())' || echo "python failed"
node -e 'fetch("https://` + upstreamName + `/node", {headers: {authorization: "Bearer " + process.env.KEY}}).then(r => r.text()).then(t => process.stdout.write(t), e => { console.log("node failed", e); })'
curl -fsS -H "X-Api-Key: $VKEY" https://` + upstreamName + `/vault || echo "vault curl failed"
git -c http.extraHeader="Authorization: Bearer $KEY" ls-remote https://` + upstreamName + `/git/repo.git 2>&1 | sed 's/^/git: /' || echo "git failed"
# A client that reads a hashed directory only: OpenSSL with -CApath
# $SSL_CERT_DIR (the control: the image's directory alone).
printf 'SSL_CERT_DIR=%s\n' "$SSL_CERT_DIR"
for d in "$SSL_CERT_DIR" /etc/ssl/certs; do
	code=$(echo | openssl s_client -connect ` + upstreamName + `:443 -servername ` + upstreamName + ` -CApath "$d" -no-CAfile -no-CAstore 2>&1 | grep -o 'Verify return code: [0-9]*' | head -n1)
	[ "$code" = "Verify return code: 0" ] && echo "capath $d: trusted" || echo "capath $d: untrusted ($code)"
done
anchor=$(ls /etc/ssl/certs/*.pem | head -n1)
openssl verify -no-CAfile -no-CAstore -CApath "$SSL_CERT_DIR" "$anchor" >/dev/null 2>&1 && echo "image anchors in dir" || echo "image anchors missing"
ls "$SSL_CERT_DIR" | grep -c '^[0-9a-f]\{8\}\.[0-9]$' | sed 's/^/hashed entries /'
# A placeholder sent where no secret of it goes is refused.
code=$(curl -sS -o /dev/null -w '%{http_code}' -H "X-Other: $KEY" https://` + upstreamName + `/leak)
echo "leak status $code"
# The search for the values: a control token placed where a value
# could be is found; the values are not.
control="ctl""-token-42"
printf '%s\n' "$control" > /tmp/control
for needle in "$control" "secret""value" "vault-token""-0123456789"; do
	hits=$( (for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f"; done 2>/dev/null; grep -rsahF -- "$needle" /tmp /run /workspace /etc /home /root /var 2>/dev/null) | grep -caF -- "$needle")
	echo "needle ${#needle} hits $hits"
done
`
	args := []string{"run", "--image", "host", "-e", "HOME=/tmp", "--network", "filtered", "--allow-domain", upstreamName,
		"-S", "KEY=" + inline + ":" + upstreamName, "--secret", "VKEY:" + upstreamName + ":x-api-key", "--", "sh", "-c", script}
	r := n.a.run(args...)
	if r.code != 0 {
		t.Fatalf("run -S: %v", r)
	}
	out := r.stdout
	t.Logf("inside the sandbox:\n%s", out)
	for _, want := range []string{
		"KEY=ak-proxy-managed VKEY=ak-proxy-managed",
		"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
		"upstream ok /curl", "upstream ok /python", "upstream ok /node", "upstream ok /vault",
		"git: " + gitCommit + "\tHEAD\ngit: " + gitCommit + "\trefs/heads/main\n",
		"SSL_CERT_DIR=/run/agentkernel/certs\n",
		"capath /run/agentkernel/certs: trusted\n",
		"capath /etc/ssl/certs: untrusted (Verify return code: 2",
		"image anchors in dir",
		"leak status 403",
		fmt.Sprintf("needle %d hits 1", len("ctl-token-42")),
		fmt.Sprintf("needle %d hits 0", len(inline)),
		fmt.Sprintf("needle %d hits 0", len(vaultValue)),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("inside the sandbox: no %q in\n%s\nstderr: %s", want, out, r.stderr)
		}
	}
	if strings.Contains(out, inline) || strings.Contains(out, vaultValue) {
		t.Errorf("a secret's value reached the sandbox's output:\n%s", out)
	}
	got := map[string]upstreamRequest{}
	for _, q := range up.requests() {
		got[q.path] = q
	}
	for _, p := range []string{"/curl", "/python", "/node"} {
		if got[p].auth != "Bearer "+inline {
			t.Errorf("upstream %s: Authorization %q, want the inline secret", p, got[p].auth)
		}
	}
	if q := got["/git/repo.git/info/refs"]; q.auth != "Bearer "+inline {
		t.Errorf("upstream git info/refs: Authorization %q, want the inline secret", q.auth)
	}
	if q := got["/vault"]; q.apiKey != vaultValue || q.auth != "Bearer "+inline {
		t.Errorf("upstream /vault: X-Api-Key %q, Authorization %q: want the vault's value and the inline one", q.apiKey, q.auth)
	}
	if _, ok := got["/leak"]; ok {
		t.Errorf("the request with a misplaced placeholder reached the upstream")
	}

	// The audit log names what was injected for which host; no file of
	// the data dir holds a value.
	log, _ := os.ReadFile(filepath.Join(n.a.dataDir, "audit.jsonl"))
	if !strings.Contains(string(log), `"secret_injected"`) || !strings.Contains(string(log), "secret KEY for "+upstreamName) || !strings.Contains(string(log), "secret VKEY for "+upstreamName) {
		t.Errorf("audit log without the injections:\n%s", log)
	}
	_ = filepath.Walk(n.a.dataDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), inline) || strings.Contains(string(b), vaultValue) {
				t.Errorf("%s holds a secret's value in clear", p)
			}
		}
		return nil
	})

	// Refusals: exit status 125 with a line that says why, nothing run.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--network", "filtered", "--allow-domain", upstreamName, "-S", "KEY"}, "expected KEY:HOST"},
		{[]string{"--network", "filtered", "--allow-domain", upstreamName, "-S", "NOPE:" + upstreamName}, "secret 'NOPE' is not in the vault"},
		{[]string{"--network", "filtered", "--allow-domain", upstreamName, "-S", "K$Y:" + upstreamName}, "invalid secret name"},
		{[]string{"--network", "none", "-S", "KEY=x:" + upstreamName}, "needs network egress"},
		{[]string{"--network", "filtered", "--allow-domain", "allowed.test", "-S", "KEY=x:" + upstreamName}, "--allow-domain " + upstreamName},
		{[]string{"--name", "kept", "-S", "KEY=x:" + upstreamName}, "not supported for persistent sandboxes"},
		{[]string{"--network", "full", "-S", "BADV:" + upstreamName}, "control character"},
	} {
		args := append(append([]string{"run", "--image", "host"}, c.args...), "--", "sh", "-c", "echo ran")
		r := n.a.run(args...)
		if r.code != 125 || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stdout, "ran") || strings.Contains(r.stderr, "badline") {
			t.Errorf("%v: want exit 125 saying %q: %v", c.args, c.want, r)
		}
	}

	// A dry run shows the spec without the values.
	r = n.a.run("run", "--dry-run", "--image", "host", "--network", "full", "-S", "KEY="+inline+":"+upstreamName, "-S", "VKEY:"+upstreamName+":x-api-key", "--", "true")
	if r.code != 0 || strings.Contains(r.stdout, inline) || strings.Contains(r.stdout, vaultValue) || strings.Contains(r.stdout, "PRIVATE KEY") {
		t.Errorf("dry run with -S: %v", r)
	}
}

// TestSecretTrustStore: in an image with no CA bundle of its own (the
// busybox test image), the sandbox's CA is the whole bundle, at the first
// usual path, and alone at /etc/agentkernel/ca.crt, both read-only, and
// the trust variables name the bundle over what -e gave them; its
// SSL_CERT_DIR holds the CA under its subject hash and a link to the
// bundle (the image's /etc/ssl/certs, made for it), read-only.
func TestSecretTrustStore(t *testing.T) {
	a, ref := withRegistry(t)
	if r := a.run("run", "--image", ref, "--", "true"); r.code != 0 {
		t.Fatalf("pulling the test image: %v", r)
	}
	lab := netlab.New(t)
	a.wrap = labWrap(lab.ClientNS())
	want := "TOKEN=ak-proxy-managed\n"
	for _, v := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"} {
		want += v + "=/etc/ssl/certs/ca-certificates.crt\n"
	}
	want += "SSL_CERT_DIR=/run/agentkernel/certs\n"
	want += "certs 1 1\nsame\nread-only\nno key\ndir HASH.0 ca-certificates.crt \ndir same\ndir read-only\n"
	// The sandbox built on a thread of agentkernel's, and by the
	// re-executed init.
	for _, env := range [][]string{nil, {"AGENTKERNEL_REEXEC_INIT=1"}} {
		a.env = env
		r := a.run("run", "--image", ref, "--pull", "never", "--network", "full", "-e", "SSL_CERT_FILE=/elsewhere", "-e", "TOKEN=real",
			"-S", "TOKEN=hunter2hunter2:api.example.test", "-e", "SSL_CERT_DIR=/elsewhere", "--", "sh", "-c", `
for v in TOKEN SSL_CERT_FILE REQUESTS_CA_BUNDLE NODE_EXTRA_CA_CERTS CURL_CA_BUNDLE GIT_SSL_CAINFO SSL_CERT_DIR; do eval "echo $v=\$$v"; done
echo "certs $(grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt) $(grep -c 'BEGIN CERTIFICATE' /etc/agentkernel/ca.crt)"
cmp /etc/ssl/certs/ca-certificates.crt /etc/agentkernel/ca.crt && echo same
(echo x >> /etc/agentkernel/ca.crt) 2>/dev/null && echo writable || echo read-only
grep -rl PRIVATE /etc/ssl /etc/agentkernel 2>/dev/null || echo "no key"
echo "dir $(ls "$SSL_CERT_DIR" | sed 's/^[0-9a-f]\{8\}\.0$/HASH.0/' | sort | tr '\n' ' ')"
cmp "$SSL_CERT_DIR"/*.0 /etc/agentkernel/ca.crt && echo "dir same"
(touch "$SSL_CERT_DIR"/x) 2>/dev/null && echo "dir writable" || echo "dir read-only"`)
		if r.code != 0 || r.stdout != want {
			t.Errorf("%v: inside:\n%s\nwant:\n%s\n%v", env, r.stdout, want, r)
		}
	}
}

// TestSecretInjectionRootless: the same injection for a user without
// privileges, with a TUN device and, where /dev/net/tun cannot be opened,
// through the sandbox's HTTP proxy; a --placeholder-secrets file is the
// command's user's, mode 0400.
func TestSecretInjectionRootless(t *testing.T) {
	n := newNetEnv(t)
	up := newSecretUpstream(t, n.lab)
	ra, _ := rootlessAK(t)
	// The helper runs as that user: the upstream's CA must be readable.
	dir, err := os.MkdirTemp("", "ak-secret-ca-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	b, _ := os.ReadFile(up.caFile)
	if err := os.WriteFile(caFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ra.env = []string{"SSL_CERT_FILE=" + caFile}
	base := ra.wrap
	for _, c := range []struct {
		name string
		wrap []string
	}{
		{"tun", append(labWrap(n.lab.ClientNS()), base...)},
		{"proxy", append(append(labWrap(n.lab.ClientNS()), "unshare", "-m", "sh", "-c",
			`mount --bind /dev/null /dev/net/tun && exec "$@"`, "sh"), base...)},
	} {
		ra.wrap = c.wrap
		r := ra.run("run", "--image", "host", "--network", "filtered", "--allow-domain", upstreamName, "-S", "KEY=rootless-value-"+c.name+":"+upstreamName,
			"--secret-file", "KEY", "--placeholder-secrets",
			"--", "sh", "-c", `echo "KEY=$KEY"; curl -fsS --max-time 10 -H "Authorization: Bearer $KEY" https://`+upstreamName+`/rootless-`+c.name+`
f=$AGENTKERNEL_SECRETS_PATH/KEY; [ "$(stat -c '%a %u' "$f")" = "400 $(id -u)" ] && echo "file $(cat "$f")"`)
		if r.code != 0 || !strings.Contains(r.stdout, "KEY=ak-proxy-managed\nupstream ok /rootless-"+c.name+"\nfile ak-proxy-managed\n") {
			t.Errorf("%s: %v", c.name, r)
		}
		found := false
		for _, q := range up.requests() {
			if q.path == "/rootless-"+c.name {
				found = true
				if q.auth != "Bearer rootless-value-"+c.name {
					t.Errorf("%s: upstream got Authorization %q", c.name, q.auth)
				}
			}
		}
		if !found {
			t.Errorf("%s: the request did not reach the upstream", c.name)
		}
	}
}

//go:build linux

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/image/imagetest"
	"github.com/agentkernel/agentkernel/internal/testenv/netlab"
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
// sent to a header no binding names is refused.
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

// TestGVisorSecretFiles: run -B gvisor --secret-file, as native's
// (TestSecretFiles): the vault's value and a binding's inline one at
// /run/agentkernel/secrets/KEY, mode 0400, owned by the command's user
// (root, and uid 1000 with -u), the directory read-only; the value in no
// process's environment and no other file of the sandbox (a control
// token planted the same way is found), nor in any file of the data
// directory. With --placeholder-secrets the file holds the placeholder,
// and the request that carries it reaches the upstream with the vault's
// value, which is nowhere inside.
func TestGVisorSecretFiles(t *testing.T) {
	a, ref, lab := gvNetEnv(t)
	up := newSecretUpstream(t, lab)
	a.env = append(a.env, "SSL_CERT_FILE="+up.caFile)
	tools := buildHTTPSClient(t)
	const fileValue = "gv-file-secret-0123456789"
	a.stdin = fileValue
	if r := a.run("secret", "set", "FKEY"); r.code != 0 {
		t.Fatalf("secret set: %v", r)
	}
	a.stdin = ""
	const inline = "gv-inline-secret-98765"
	search := `
control="ctl""-token-77"
printf '%s\n' "$control" > /tmp/control
for needle in "$control" "$1$2"; do
	hits=$( (for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f"; done 2>/dev/null
		find / -path /proc -prune -o -path /sys -prune -o -path /dev -prune -o -path /tools -prune -o -path /run/agentkernel/secrets -prune -o -type f -print 2>/dev/null | xargs grep -shF -- "$needle" 2>/dev/null) | grep -cF -- "$needle")
	echo "needle ${#needle} hits $hits"
done
`
	inspect := `
d=/run/agentkernel/secrets
echo "path=$AGENTKERNEL_SECRETS_PATH"
echo "FKEY=$(cat "$d/FKEY")"
echo "KEY=$(cat "$d/KEY") env=$KEY"
echo "owner $(stat -c '%a %u %g' "$d/FKEY") me $(id -u) $(id -g)"
echo "dir $(stat -c '%a %u' "$d")"
(echo x >> "$d/FKEY") 2>/dev/null && echo "appended" || echo "append refused"
(echo x > "$d/NEW") 2>/dev/null && echo "created" || echo "create refused"
(rm -f "$d/FKEY" && test ! -e "$d/FKEY") 2>/dev/null && echo "removed" || echo "remove refused"
ls -A "$d" | tr '\n' ' '; echo
` + search
	for _, user := range []struct{ flag, uid string }{{"", "0"}, {"1000:1000", "1000"}} {
		flags := []string{"--pull", "never", "--network", "filtered", "--allow-domain", upstreamName,
			"-S", "KEY=" + inline + ":" + upstreamName, "--secret-file", "FKEY", "--secret-file", "KEY"}
		if user.flag != "" {
			flags = append(flags, "-u", user.flag)
		}
		r := a.gv(ref, flags, "sh", "-c", inspect, "sh", fileValue[:8], fileValue[8:])
		if r.code != 0 {
			t.Fatalf("run -B gvisor --secret-file (user %q): %v", user.flag, r)
		}
		t.Logf("inside, user %q:\n%s", user.flag, r.stdout)
		for _, want := range []string{
			"path=/run/agentkernel/secrets\n",
			"FKEY=" + fileValue + "\n",
			"KEY=" + inline + " env=ak-proxy-managed\n",
			fmt.Sprintf("owner 400 %s %s me %s %s\n", user.uid, user.uid, user.uid, user.uid),
			fmt.Sprintf("dir 500 %s\n", user.uid),
			"append refused\n", "create refused\n", "remove refused\n",
			"FKEY KEY \n",
			fmt.Sprintf("needle %d hits 1\n", len("ctl-token-77")),
			fmt.Sprintf("needle %d hits 0\n", len(fileValue)),
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("user %q: no %q inside:\n%s\nstderr: %s", user.flag, want, r.stdout, r.stderr)
			}
		}
	}

	// --placeholder-secrets: the file holds the placeholder; the request
	// that carries it arrives with the vault's value.
	r := a.gv(ref, []string{"--pull", "never", "-v", tools + ":/tools:ro", "--network", "filtered", "--allow-domain", upstreamName,
		"-S", "FKEY:" + upstreamName, "--secret-file", "FKEY", "--placeholder-secrets"}, "sh", "-c", `
V=$(cat "$AGENTKERNEL_SECRETS_PATH/FKEY")
echo "file=$V env=$FKEY"
export V
/tools/client https://`+upstreamName+`/gv-placeholder-file Authorization "Bearer " V
`+search, "sh", fileValue[:8], fileValue[8:])
	t.Logf("inside, placeholders:\n%s", r.stdout)
	for _, want := range []string{
		"file=ak-proxy-managed env=ak-proxy-managed\n",
		"status 200: upstream ok /gv-placeholder-file\n",
		fmt.Sprintf("needle %d hits 1\n", len("ctl-token-77")),
		fmt.Sprintf("needle %d hits 0\n", len(fileValue)),
	} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("--placeholder-secrets: no %q in %v", want, r)
		}
	}
	up.wantAuth(t, "--placeholder-secrets", "/gv-placeholder-file", "Bearer "+fileValue)
	noValueOnDisk(t, a.dataDir, fileValue)
	noValueOnDisk(t, a.dataDir, inline)
	if r := a.gv(ref, []string{"--pull", "never", "--network", "none", "--secret-file", "FKEY", "--name", "kept"}, "true"); r.code != 125 || !strings.Contains(r.stderr, "persistent sandboxes") {
		t.Errorf("--secret-file for a persistent sandbox: %v", r)
	}
}

// TestGVisorSecretPersistent: sandbox create -B gvisor -S, as native's
// (TestSecretPersistentSandbox): every exec sees the placeholder, and
// its request reaches the upstream with the vault's value, verified end
// to end against the upstream's own CA; the value is in no process's
// environment and no file inside, nor in clear in any file of the data
// directory; the sandbox's CA stays in its directory on the host, 0600,
// and is the one its trust store holds, the same across a stop and
// start and a kill -9 of its supervisor; a refusal of its network policy
// reaches the audit log as it happens, and the stop records the
// injections; a snapshot restored under a new name binds the same key
// with a CA of its own, and no snapshot file holds a key; a key deleted
// from the vault fails the next start, named.
func TestGVisorSecretPersistent(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("persistent gvisor sandboxes exist on amd64 only")
	}
	a, ref, lab := gvNetEnv(t)
	up := newSecretUpstream(t, lab)
	a.env = append(a.env, "SSL_CERT_FILE="+up.caFile)
	tools := buildHTTPSClient(t)
	const value = "gv-persistent-token-5551234"
	a.stdin = value
	a.must("secret", "set", "PKEY")
	a.stdin = ""
	a.must("sandbox", "create", "gvsec", "-B", "gvisor", "--image", ref, "--pull", "never", "-v", tools+":/tools:ro",
		"--network", "filtered", "--allow-domain", upstreamName, "-S", "PKEY:"+upstreamName, "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "-f", "gvsec") })
	dir := filepath.Join(a.dataDir, "sandboxes", "gvsec")
	// No memory snapshot of a sandbox with secrets: a restored one would
	// have a CA of its own.
	if r := a.run("snapshot", "take", "gvsec", "--name", "secmem", "--memory"); r.code != 125 || !strings.Contains(r.stderr, "secrets") {
		t.Errorf("--memory of a sandbox with secrets: %v", r)
	}

	check := func(name, path string) string {
		t.Helper()
		r := a.run("exec", name, "--", "sh", "-c", `
printf 'PKEY=%s\n' "$PKEY"
/tools/client https://`+upstreamName+path+` Authorization "Bearer " PKEY
control="ctl""-token-43"
printf '%s\n' "$control" > /tmp/control
for needle in "$control" "gv-persistent-token""-5551234"; do
	hits=$( (for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f"; done 2>/dev/null
		find / -path /proc -prune -o -path /sys -prune -o -path /dev -prune -o -path /tools -prune -o -type f -print 2>/dev/null | xargs grep -shF -- "$needle" 2>/dev/null) | grep -cF -- "$needle")
	echo "needle ${#needle} hits $hits"
done
rm -f /tmp/control
grep -rlsF 'PRIVATE KEY' /etc /tmp /run /root 2>/dev/null || echo "no key"
echo "--- ca"
cat "$SSL_CERT_FILE"`)
		out, ca, _ := strings.Cut(r.stdout, "--- ca\n")
		for _, want := range []string{"PKEY=ak-proxy-managed\n", "status 200: upstream ok " + path + "\n", "needle 12 hits 1\n", "needle 27 hits 0\n", "no key\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("exec %s: no %q in\n%s\n%v", path, want, out, r)
			}
		}
		if strings.Contains(r.stdout, value) || strings.Contains(r.stderr, value) {
			t.Errorf("exec %s: the value reached the sandbox's output: %v", path, r)
		}
		up.wantAuth(t, "exec", path, "Bearer "+value)
		return lastCert(ca)
	}
	ca1 := check("gvsec", "/gv-first")
	fi, err := os.Stat(filepath.Join(dir, secretCAFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the sandbox's CA file: %v %v", fi, err)
	}
	if host := caCertOf(t, filepath.Join(dir, secretCAFile)); host != ca1 {
		t.Errorf("the CA the sandbox trusts is not its helper's:\ninside:\n%s\nhost:\n%s", ca1, host)
	}

	// A refusal of its network policy goes to the audit log as it
	// happens.
	a.run("exec", "gvsec", "--", "wget", "-q", "-O", "/dev/null", "http://other.test/")
	denied := false
	for deadline := time.Now().Add(10 * time.Second); !denied && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		log, _ := os.ReadFile(filepath.Join(a.dataDir, "audit.jsonl"))
		denied = bytes.Contains(log, []byte(`"sandbox":"gvsec","action":"network_deny"`)) && bytes.Contains(log, []byte("other.test"))
	}
	if !denied {
		t.Error("the audit log lacks the running sandbox's refusal of other.test")
	}
	a.must("sandbox", "stop", "gvsec")
	if log, _ := os.ReadFile(filepath.Join(a.dataDir, "audit.jsonl")); !bytes.Contains(log, []byte(`"sandbox":"gvsec","action":"secret_injected"`)) || !bytes.Contains(log, []byte("secret PKEY for "+upstreamName)) {
		t.Errorf("the audit log lacks the sandbox's injections:\n%s", log)
	}
	a.must("sandbox", "start", "gvsec")
	if ca := check("gvsec", "/gv-restarted"); ca != ca1 {
		t.Errorf("the CA changed across a restart")
	}

	// kill -9 of the supervisor, then start: the values again.
	sup := a.info("gvsec").SupervisorPID
	if sup <= 0 {
		t.Fatalf("no supervisor pid: %+v", a.info("gvsec"))
	}
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); a.info("gvsec").Status != "stopped" && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	a.must("sandbox", "start", "gvsec")
	if ca := check("gvsec", "/gv-after-kill"); ca != ca1 {
		t.Errorf("the CA changed across a kill -9 of the supervisor")
	}

	// A snapshot restored under a new name binds the same key, with a CA
	// of its own; no snapshot file holds a key or the value.
	a.must("snapshot", "take", "gvsec", "--name", "gvsecsnap")
	a.must("snapshot", "restore", "gvsecsnap", "--as", "gvsecrest")
	t.Cleanup(func() { a.run("sandbox", "rm", "-f", "gvsecrest") })
	a.must("sandbox", "start", "gvsecrest")
	caR := check("gvsecrest", "/gv-restored")
	if caR == ca1 {
		t.Error("the restored sandbox trusts the source's CA")
	}
	if host := caCertOf(t, filepath.Join(a.dataDir, "sandboxes", "gvsecrest", secretCAFile)); host != caR {
		t.Errorf("the CA the restored sandbox trusts is not its helper's")
	}
	a.must("sandbox", "rm", "-f", "gvsecrest")
	_ = filepath.Walk(filepath.Join(a.dataDir, "snapshots"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("PRIVATE KEY")) {
				t.Errorf("snapshot file %s holds a private key", p)
			}
		}
		return nil
	})

	a.must("sandbox", "stop", "gvsec")
	a.must("secret", "delete", "PKEY")
	if r := a.run("sandbox", "start", "gvsec"); r.code == 0 || !strings.Contains(r.stderr, "'PKEY'") || !strings.Contains(r.stderr, "not in the vault") {
		t.Errorf("start with the key deleted: %v", r)
	}
	if r := a.run("sandbox", "info", "gvsec", "--json"); strings.Contains(r.stdout, value) {
		t.Errorf("sandbox info shows the value: %v", r)
	}
	noValueOnDisk(t, a.dataDir, value)
}

// TestGVisorSecretHostileImage: an image whose links lead the trust
// store's and the secret files' places out of its root, to the host's
// files: its CA bundles links to a host file (absolute and climbing),
// /etc/agentkernel and /run links to host directories. A run with -S,
// and a persistent sandbox's exec, trust the sandbox's CA in a bundle
// that holds nothing of the host's file; nothing is made in the host's
// directories and the host's file is unchanged; --secret-file is refused
// saying why, before anything is written.
func TestGVisorSecretHostileImage(t *testing.T) {
	a, _ := withGVisor(t)
	hostDir, outside, outsideRun := t.TempDir(), t.TempDir(), t.TempDir()
	hostFile := filepath.Join(hostDir, "host-bundle.pem")
	const marker = "HOST-ONLY-BUNDLE-MARKER"
	hostBody := "-----BEGIN CERTIFICATE-----\n" + marker + "\n-----END CERTIFICATE-----\n"
	if err := os.WriteFile(hostFile, []byte(hostBody), 0o644); err != nil {
		t.Fatal(err)
	}
	img := imagetest.Image(t, imagetest.BusyboxConfig(),
		imagetest.Layer(t, imagetest.BusyboxFiles(t)...),
		imagetest.Layer(t,
			imagetest.Dir("etc/pki"), imagetest.Dir("etc/pki/tls"), imagetest.Dir("etc/pki/tls/certs"), imagetest.Dir("etc/ssl"),
			imagetest.Symlink("etc/pki/tls/certs/ca-bundle.crt", hostFile),
			imagetest.Symlink("etc/ssl/cert.pem", strings.Repeat("../", 12)+strings.TrimPrefix(hostFile, "/")),
			imagetest.Symlink("etc/agentkernel", outside),
			imagetest.Symlink("run", outsideRun)))
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "tools/hostile-secrets:1", img)
	if r := a.run("run", "--image", ref, "--", "true"); r.code != 0 {
		t.Fatalf("pull: %v", r)
	}
	lab := netlab.New(t)
	a.wrap = labWrap(lab.ClientNS())
	up := newSecretUpstream(t, lab)
	a.env = append(a.env, "SSL_CERT_FILE="+up.caFile)
	tools := buildHTTPSClient(t)
	const value = "gv-hostile-secret-31337"
	a.stdin = value
	a.must("secret", "set", "HKEY")
	a.stdin = ""
	script := `
printf 'HKEY=%s\n' "$HKEY"
echo "bundle $SSL_CERT_FILE"
grep -c 'BEGIN CERTIFICATE' "$SSL_CERT_FILE" | sed 's/^/bundle certs /'
test -e /etc/agentkernel/ca.crt && echo "ca.crt present" || echo "no ca.crt"
/tools/client https://` + upstreamName + `/gv-hostile Authorization "Bearer " HKEY
cat "$SSL_CERT_FILE"
`
	checkOut := func(what string, r result) {
		t.Helper()
		for _, want := range []string{"HKEY=ak-proxy-managed\n", "bundle /etc/ssl/certs/ca-certificates.crt\n", "bundle certs 1\n", "no ca.crt\n", "status 200: upstream ok /gv-hostile\n"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%s: no %q in %v", what, want, r)
			}
		}
		if strings.Contains(r.stdout, marker) {
			t.Errorf("%s: the host's file reached the sandbox's bundle: %v", what, r)
		}
	}
	hostUnchanged := func(what string) {
		t.Helper()
		for _, d := range []string{outside, outsideRun} {
			if ents, _ := os.ReadDir(d); len(ents) > 0 {
				t.Errorf("%s: made in the host's %s: %v", what, d, ents)
			}
		}
		if b, _ := os.ReadFile(hostFile); string(b) != hostBody {
			t.Errorf("%s: the host's file changed: %q", what, b)
		}
	}
	r := a.gv(ref, []string{"--pull", "never", "-v", tools + ":/tools:ro", "--network", "filtered", "--allow-domain", upstreamName, "-S", "HKEY:" + upstreamName}, "sh", "-c", script)
	checkOut("run -S", r)
	hostUnchanged("run -S")

	r = a.gv(ref, []string{"--pull", "never", "--network", "none", "--secret-file", "HKEY"}, "sh", "-c", "echo ran")
	if r.code == 0 || strings.Contains(r.stdout, "ran") || !strings.Contains(r.stderr, "secret files") {
		t.Errorf("--secret-file with /run a link out of the root: %v", r)
	}
	hostUnchanged("--secret-file")

	if runtime.GOARCH == "amd64" {
		a.must("sandbox", "create", "gvhostile", "-B", "gvisor", "--image", ref, "--pull", "never", "-v", tools+":/tools:ro",
			"--network", "filtered", "--allow-domain", upstreamName, "-S", "HKEY:"+upstreamName, "--start")
		t.Cleanup(func() { a.run("sandbox", "rm", "-f", "gvhostile") })
		checkOut("exec in a persistent sandbox", a.run("exec", "gvhostile", "--", "sh", "-c", script))
		a.must("sandbox", "stop", "gvhostile")
		a.must("sandbox", "start", "gvhostile")
		checkOut("exec after a restart", a.run("exec", "gvhostile", "--", "sh", "-c", script))
		hostUnchanged("persistent sandbox")
	}
	noValueOnDisk(t, a.dataDir, value)
}

//go:build linux

package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/testenv/netlab"
)

// TestNetworkPersistent: a persistent sandbox with egress, made and used
// in the lab's client namespace: its policy holds for every exec, its
// published port answers from the host, info and list show its address,
// and its network helper ends with it.
func TestNetworkPersistent(t *testing.T) {
	n := newNetEnv(t)
	a := n.a
	create := []string{"sandbox", "create", "web", "--image", "host", "--start", "-v", n.lab.CAFile() + ":" + labCA + ":ro",
		"-e", "SSL_CERT_FILE=" + labCA, "-e", "CURL_CA_BUNDLE=" + labCA,
		"--network", "filtered", "--allow-domain", "allowed.test", "-P", "18082:8000"}
	if r := a.run(create...); r.code != 0 {
		t.Fatalf("create: %v", r)
	}
	defer a.run("sandbox", "rm", "-f", "web")
	if r := a.run("exec", "web", "--", "curl", "-sS", "--max-time", "5", "https://allowed.test/"); r.code != 0 || !strings.Contains(r.stdout, "netlab web") {
		t.Errorf("an allowed name from exec: %v", r)
	}
	start := time.Now()
	if r := a.run("exec", "web", "--", "curl", "-sS", "--max-time", "5", "http://"+netlab.Metadata4+"/"); r.code == 0 || time.Since(start) > 3*time.Second {
		t.Errorf("metadata from exec: %v", r)
	}
	if r := a.run("exec", "web", "--", "curl", "-sS", "--max-time", "5", "https://other.test/"); r.code != 6 {
		t.Errorf("a name not allowed from exec: want curl's exit 6 (NXDOMAIN): %v", r)
	}
	if n.lab.Reached(netlab.Metadata4) {
		t.Error("the metadata server was reached")
	}
	// Each refusal is in the audit log as it happens, named by sandbox.
	deadline := time.Now().Add(5 * time.Second)
	var log []byte
	for time.Now().Before(deadline) {
		log, _ = os.ReadFile(filepath.Join(a.dataDir, "audit.jsonl"))
		if bytes.Contains(log, []byte(`"sandbox":"web","action":"network_deny"`)) && bytes.Contains(log, []byte("other.test")) && bytes.Contains(log, []byte(netlab.Metadata4)) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !bytes.Contains(log, []byte(`"sandbox":"web","action":"network_deny"`)) || !bytes.Contains(log, []byte("other.test")) || !bytes.Contains(log, []byte(netlab.Metadata4)) {
		t.Errorf("the audit log lacks the sandbox's refusals:\n%s", log)
	}
	// The published port, from the host (the client namespace).
	if r := a.run("exec", "web", "--", "sh", "-c", "cd /tmp && echo published > p.txt && (python3 -m http.server 8000 >/dev/null 2>&1 &) && sleep 1"); r.code != 0 {
		t.Fatalf("server: %v", r)
	}
	c := n.lab.Command(t.Context(), "curl", "-sS", "--max-time", "5", "--retry", "5", "--retry-connrefused", "http://127.0.0.1:18082/p.txt")
	if out, err := c.CombinedOutput(); err != nil || string(out) != "published\n" {
		t.Errorf("published port: %v %q", err, out)
	}
	if r := a.run("sandbox", "info", "web"); !strings.Contains(r.stdout, "10.0.2.100") || !strings.Contains(r.stdout, "18082:8000/tcp") || !strings.Contains(r.stdout, "filtered") {
		t.Errorf("info: %v", r)
	}
	if r := a.run("sandbox", "list"); !strings.Contains(r.stdout, "filtered 10.0.2.100") {
		t.Errorf("list: %v", r)
	}
	before := len(helperProcesses(t))
	if before == 0 {
		t.Fatal("no network helper while the sandbox runs (the check below could not fail)")
	}
	if r := a.run("sandbox", "stop", "web"); r.code != 0 {
		t.Fatalf("stop: %v", r)
	}
	deadline = time.Now().Add(5 * time.Second)
	for len(helperProcesses(t)) != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if left := helperProcesses(t); len(left) != 0 {
		t.Errorf("network helpers left after stop: %v", left)
	}
}

// TestNetworkRootlessProxy: a rootless run where /dev/net/tun cannot be
// opened (a /dev/null bound over it, in a mount namespace of the test's)
// reaches the network through the HTTP proxy inside the sandbox, under
// the same policy, and says so.
func TestNetworkRootlessProxy(t *testing.T) {
	n := newNetEnv(t)
	ra, _ := rootlessAK(t)
	ra.wrap = append(append(labWrap(n.lab.ClientNS()), "unshare", "-m", "sh", "-c",
		`mount --bind /dev/null /dev/net/tun && exec "$@"`, "sh"), ra.wrap...)
	run := func(script string, policy ...string) result {
		args := []string{"run", "--image", "host", "-v", n.lab.CAFile() + ":" + labCA + ":ro", "-e", "CURL_CA_BUNDLE=" + labCA}
		args = append(append(args, policy...), "--", "sh", "-c", script)
		return ra.run(args...)
	}
	r := run("ls /sys/class/net; curl -sS --max-time 5 https://allowed.test/", "--network", "filtered", "--allow-domain", "allowed.test")
	if r.code != 0 || !strings.Contains(r.stdout, "netlab web") || strings.Contains(r.stdout, "eth0") || !strings.Contains(r.stderr, "HTTP proxy") {
		t.Fatalf("an allowed name through the proxy: %v", r)
	}
	r = run("curl -sS --max-time 5 https://other.test/; echo curl=$?; curl -sfS --max-time 5 http://"+netlab.Metadata4+"/; echo curl=$?", "--network", "filtered", "--allow-domain", "allowed.test")
	if !strings.Contains(r.stdout, "curl=56\ncurl=22\n") || !strings.Contains(r.stderr, "other.test") {
		t.Errorf("refused through the proxy (CONNECT refused: 56; metadata: 403, 22): %v", r)
	}
	if n.lab.Reached(netlab.Metadata4) {
		t.Error("the metadata server was reached")
	}
}

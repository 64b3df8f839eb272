//go:build linux

package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
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

// noTUN wraps a's commands in a mount namespace of their own where
// /dev/net/tun is /dev/null: the sandbox cannot open a TUN device there
// and falls back to proxy mode, as in a container without the device.
func noTUN(a *ak, lab *netlab.Lab) {
	a.wrap = append(append(labWrap(lab.ClientNS()), "unshare", "-m", "sh", "-c",
		`mount --bind /dev/null /dev/net/tun && exec "$@"`, "sh"), a.wrap...)
}

// proxyServers is a sandbox command line serving /tmp over HTTP on
// 127.0.0.1:8000, [::1]:8002 and 8001 (not published), with a marker file.
const proxyServers = "cd /tmp && echo proxied > p.txt && (python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &) && " +
	"(python3 -m http.server 8002 --bind ::1 >/dev/null 2>&1 &) && (python3 -m http.server 8001 >/dev/null 2>&1 &)"

// checkProxyPublished fetches the marker through host ports base (to
// 8000), base+2 (to 8002, a server on ::1 only) from the lab's client
// namespace, and checks that base+3, published to a sandbox port where
// nothing listens, gives nothing (in particular not another port's
// server).
func checkProxyPublished(t *testing.T, lab *netlab.Lab, base int) {
	t.Helper()
	for _, p := range []int{base, base + 2} {
		// Until the server listens, the port accepts and closes.
		c := lab.Command(t.Context(), "curl", "-s", "--max-time", "5", "--retry", "20", "--retry-delay", "1", "--retry-all-errors", "http://127.0.0.1:"+strconv.Itoa(p)+"/p.txt")
		if out, err := c.Output(); err != nil || string(out) != "proxied\n" {
			t.Errorf("published port %d: %v %q", p, err, out)
		}
	}
	c := lab.Command(t.Context(), "curl", "-sS", "--max-time", "5", "http://127.0.0.1:"+strconv.Itoa(base+3)+"/p.txt")
	if out, err := c.CombinedOutput(); err == nil || strings.Contains(string(out), "proxied") {
		t.Errorf("a published port with no server in the sandbox answered: %v %q", err, out)
	}
}

// proxyPorts are the -P flags checkProxyPublished needs.
func proxyPorts(base int) []string {
	p := func(h, s int) string { return strconv.Itoa(h) + ":" + strconv.Itoa(s) }
	return []string{"-P", p(base, 8000), "-P", p(base+2, 8002), "-P", p(base+3, 8003)}
}

// TestNetworkProxyPublish: without a TUN device (proxy mode), root and
// rootless, a run's and a persistent sandbox's published ports reach
// servers on the sandbox's loopback (IPv4 and IPv6) from the host, and
// the run says once that it is in proxy mode; root falls back to proxy
// mode as rootless does, and its egress goes through the proxy.
func TestNetworkProxyPublish(t *testing.T) {
	n := newNetEnv(t)
	ra, _ := rootlessAK(t)
	callers := []struct {
		name string
		a    *ak
		base int
	}{{"root", n.a, 18090}, {"rootless", ra, 18095}}
	for _, c := range callers {
		t.Run(c.name, func(t *testing.T) {
			a := c.a
			noTUN(a, n.lab)
			// Egress through the proxy, as root too.
			r := a.run("run", "--image", "host", "-v", n.lab.CAFile()+":"+labCA+":ro", "-e", "CURL_CA_BUNDLE="+labCA,
				"--network", "filtered", "--allow-domain", "allowed.test", "--", "sh", "-c", "ls /sys/class/net; curl -sS --max-time 5 https://allowed.test/")
			if r.code != 0 || !strings.Contains(r.stdout, "netlab web") || strings.Contains(r.stdout, "eth0") || strings.Count(r.stderr, "HTTP proxy") != 1 {
				t.Fatalf("egress through the proxy: %v", r)
			}
			// A run's published ports; as root, from a sandbox built on
			// a thread and from a re-executed init.
			publishRun := func(env ...string) {
				ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
				defer cancel()
				args := append(append([]string{"run", "--image", "host", "--network", "filtered"}, proxyPorts(c.base)...), "--", "sh", "-c", proxyServers+" && sleep 60")
				cmd := a.cmd(ctx, args...)
				cmd.Env = append(cmd.Env, env...)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				checkProxyPublished(t, n.lab, c.base)
				_ = cmd.Process.Signal(os.Interrupt)
				_ = cmd.Wait()
				if !strings.Contains(stderr.String(), "HTTP proxy") {
					t.Errorf("%v: no proxy-mode notice: %s", env, stderr.String())
				}
			}
			publishRun()
			if c.name == "root" {
				publishRun("AGENTKERNEL_REEXEC_INIT=1")
			}
			// A persistent sandbox's.
			name := "proxied"
			create := append([]string{"sandbox", "create", name, "--image", "host", "--start", "--network", "filtered"}, proxyPorts(c.base)...)
			if r := a.run(create...); r.code != 0 {
				t.Fatalf("create: %v", r)
			}
			defer a.run("sandbox", "rm", "-f", name)
			if r := a.run("exec", name, "--", "sh", "-c", proxyServers+" && sleep 1"); r.code != 0 {
				t.Fatalf("servers: %v", r)
			}
			checkProxyPublished(t, n.lab, c.base)
			// The ports, and no address: there is no device to have one.
			want := strconv.Itoa(c.base) + ":8000/tcp"
			if r := a.run("sandbox", "info", name); !strings.Contains(r.stdout, want) || strings.Contains(r.stdout, "10.0.2.100") {
				t.Errorf("info: %v", r)
			}
			if r := a.run("sandbox", "list"); !strings.Contains(r.stdout, want) || strings.Contains(r.stdout, "10.0.2.100") || !strings.Contains(r.stdout, "filtered") {
				t.Errorf("list: %v", r)
			}
		})
	}
}

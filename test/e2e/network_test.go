//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/testenv/netlab"
)

// The tests of network egress run agentkernel itself in the client
// namespace of a netlab (a small internet of namespaces the test makes),
// with the host's own tools as the image, so that the clients inside
// are the real curl, Python, Node, git, pip, npm and a Go program.

// labCA is where the lab's CA certificate is mounted in the sandbox.
const labCA = "/tmp/netlab-ca.pem"

// netEnv is agentkernel run in a lab's client namespace.
type netEnv struct {
	t   *testing.T
	lab *netlab.Lab
	a   *ak
}

func newNetEnv(t *testing.T) *netEnv {
	t.Helper()
	if _, err := os.Stat(filepath.Join(filepath.Dir(binary), "agentkernel-full")); err != nil {
		t.Fatalf("agentkernel-full must sit beside agentkernel (the network helper is started from it): %v", err)
	}
	lab := netlab.New(t)
	a := newAK(t)
	a.wrap = labWrap(lab.ClientNS())
	return &netEnv{t: t, lab: lab, a: a}
}

// labWrap runs a command in the lab's client namespace ns, as 'ip netns
// exec' would (the namespace's /etc/netns files, the lab's resolv.conf,
// bound over /etc in a mount namespace of its own) but without the fresh
// /sys that ip netns exec mounts, which would hide the cgroup
// hierarchies under /sys/fs/cgroup: every run as root would then be
// refused for want of cgroup limits (docs/doctor.md).
func labWrap(ns string) []string {
	return []string{"nsenter", "--net=/run/netns/" + ns, "unshare", "--mount", "--propagation", "private", "sh", "-c",
		`for f in /etc/netns/"$0"/*; do [ -e "$f" ] && mount --bind "$f" "/etc/${f##*/}"; done; exec "$@"`, ns}
}

// args are run's arguments for a sandbox of the host's tools with the
// lab's CA trusted by every client, then policy, then the command.
func (n *netEnv) args(policy []string, command ...string) []string {
	args := []string{"run", "--image", "host", "-v", n.lab.CAFile() + ":" + labCA + ":ro"}
	for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"} {
		args = append(args, "-e", k+"="+labCA)
	}
	args = append(args, "-e", "HOME=/tmp")
	args = append(append(args, policy...), "--")
	return append(args, command...)
}

// sh runs script with sh -c in a sandbox with the given policy flags.
func (n *netEnv) sh(policy []string, script string) result {
	n.t.Helper()
	return n.a.run(n.args(policy, "sh", "-c", script)...)
}

var (
	filtered = []string{"--network", "filtered", "--allow-domain", "allowed.test", "--allow-domain", "*.allowed.test", "--allow-domain", "v6only.test"}
	full     = []string{"--network", "full", "--block-domain", "blocked.test"}
)

// goClient is a static Go program that GETs its argument with net/http
// (Go's own resolver and TLS) and prints the body.
const goClient = `package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	resp, err := http.Get(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Print(string(b))
}
`

func buildGoClient(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(goClient), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module netclient\n\ngo 1.21\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "netclient"), ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the Go client: %v\n%s", err, out)
	}
	return filepath.Join(dir, "netclient")
}

const webMarker = "netlab web host=allowed.test"

// TestNetworkClients: every kind of client reaches an allowed name, in
// filtered and full modes.
func TestNetworkClients(t *testing.T) {
	n := newNetEnv(t)
	gocl := buildGoClient(t)
	withGo := func(p []string) []string { return append([]string{"-v", gocl + ":/tmp/netclient:ro"}, p...) }
	type client struct {
		name, script, want string
		modes              [][]string
	}
	both := [][]string{filtered, full}
	clients := []client{
		{"curl", "curl -sS https://allowed.test/", webMarker, both},
		{"curl http", "curl -sS http://allowed.test/", "netlab web host=allowed.test", both},
		{"python urllib", `python3 -c 'import urllib.request; print(urllib.request.urlopen("https://allowed.test/").read().decode())'`, webMarker, both},
		{"node fetch", `node -e 'fetch("https://allowed.test/").then(r => r.text()).then(t => console.log(t))'`, webMarker, both},
		{"go net/http", "/tmp/netclient https://allowed.test/", webMarker, both},
		{"pip", "python3 -m pip install -q --disable-pip-version-check --no-cache-dir --target /tmp/py --index-url " + netlab.PyPIIndex("allowed.test") + " " + netlab.PythonPackage +
			` && PYTHONPATH=/tmp/py python3 -c 'import netlab_hello; print(netlab_hello.GREETING)'`, netlab.PythonGreeting, [][]string{filtered}},
		{"npm", "mkdir -p /tmp/p && cd /tmp/p && npm install --no-audit --no-fund --no-update-notifier --cache /tmp/npm-cache --cafile " + labCA + " --registry " + netlab.NPMRegistry("allowed.test") + " " + netlab.NPMPackage +
			` >/dev/null && node -e 'console.log(require("netlab-hello").greeting)'`, netlab.NPMGreeting, [][]string{filtered}},
		{"sub-domain", "curl -sS https://sub.allowed.test/", "netlab web host=sub.allowed.test", [][]string{filtered}},
	}
	if n.lab.GitHead() != "" {
		clients = append(clients, client{"git clone", "git clone -q " + netlab.GitURL("allowed.test") + " /tmp/r && cat /tmp/r/" + netlab.GitFile, netlab.GitContent, both})
	} else {
		t.Log("git is missing: the lab serves no repository, git clone is not tested")
	}
	for _, c := range clients {
		for _, mode := range c.modes {
			t.Run(c.name+"/"+mode[1], func(t *testing.T) {
				r := n.sh(withGo(mode), c.script)
				if r.code != 0 || !strings.Contains(r.stdout, c.want) {
					t.Fatalf("want %q: %v", c.want, r)
				}
				if strings.Contains(r.stderr, "blocked") {
					t.Errorf("an allowed run reported a refusal: %v", r)
				}
			})
		}
	}
	// The sandbox reached the lab through the policy: the lab saw the
	// requests, under the names the clients used.
	seen := false
	for _, q := range n.lab.Requests() {
		if q.Host == "allowed.test" && q.SNI == "allowed.test" {
			seen = true
		}
	}
	if !seen {
		t.Fatal("the lab's web server never saw an HTTPS request for allowed.test")
	}
}

// timedCurl prints "RC MS": curl's exit status and how long it took.
func timedCurl(args string) string {
	return `s=$(date +%s%N); curl -sS --max-time 20 ` + args + ` >/dev/null 2>&1; rc=$?; e=$(date +%s%N); echo "$rc $(( (e - s) / 1000000 ))"`
}

// parseTimed reads timedCurl's output lines.
func parseTimed(t *testing.T, out string) [][2]int {
	t.Helper()
	var res [][2]int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("unexpected output line %q", line)
		}
		rc, err1 := strconv.Atoi(f[0])
		ms, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			t.Fatalf("unexpected output line %q", line)
		}
		res = append(res, [2]int{rc, ms})
	}
	return res
}

// TestNetworkRefusals: what the policy refuses is refused fast, never
// arrives at the lab, is named on run's last line and is audited.
func TestNetworkRefusals(t *testing.T) {
	n := newNetEnv(t)
	type probe struct {
		name, curl string
		mode       []string
		rc         []int    // acceptable curl exit statuses
		notReached []string // lab addresses that must see nothing
	}
	nx, refused := []int{6}, []int{7, 6, 35, 52, 56}
	probes := []probe{
		{"filtered name NXDOMAIN", "http://other.test/", filtered, nx, []string{netlab.Web4(2), netlab.Web6(2)}},
		{"filtered address of an unallowed name", "http://" + netlab.Web4(2) + "/", filtered, []int{7}, []string{netlab.Web4(2)}},
		{"filtered v6 address of an unallowed name", "http://[" + netlab.Web6(2) + "]/", filtered, []int{7}, []string{netlab.Web6(2)}},
		{"full blocked name NXDOMAIN", "http://blocked.test/", full, nx, []string{netlab.Web4(3), netlab.Web6(3)}},
		{"rebind to loopback", "http://rebind.test/", append(filtered, "--allow-domain", "rebind.test"), refused, []string{"127.0.0.1", "::1"}},
		{"rebind to loopback full", "http://rebind.test/", full, refused, []string{"127.0.0.1", "::1"}},
		{"metadata v4", "http://" + netlab.Metadata4 + "/", full, []int{7}, []string{netlab.Metadata4}},
		{"metadata v6", "http://[" + netlab.Metadata6 + "]/", full, []int{7}, []string{netlab.Metadata6}},
		{"metadata alibaba", "http://" + netlab.MetadataAl + "/", full, []int{7}, []string{netlab.MetadataAl}},
		{"metadata name", "http://meta.test/", full, refused, []string{netlab.Metadata4, netlab.Metadata6}},
		{"metadata google name", "http://metadata.google.internal/", full, refused, []string{netlab.Metadata4}},
		{"metadata allowed name", "http://meta.test/", append(filtered, "--allow-domain", "meta.test"), refused, []string{netlab.Metadata4, netlab.Metadata6}},
		{"private filtered", "http://" + netlab.Private4 + "/", filtered, []int{7}, []string{netlab.Private4}},
		{"private v6 filtered", "http://[" + netlab.Private6 + "]/", filtered, []int{7}, []string{netlab.Private6}},
		{"cgnat filtered", "http://" + netlab.CGNAT4 + "/", filtered, []int{7}, []string{netlab.CGNAT4}},
		{"private name filtered", "http://private.test/", append(filtered, "--allow-domain", "private.test"), refused, []string{netlab.Private4, netlab.Private6}},
		{"host address", "http://" + netlab.Client4 + "/", full, []int{7}, []string{netlab.Client4}},
		{"host v6 address", "http://[" + netlab.Client6 + "]/", full, []int{7}, []string{netlab.Client6}},
		{"host name", "http://host.test/", full, refused, []string{netlab.Client4, netlab.Client6}},
		{"host gateway address", "http://" + netlab.Gateway4 + "/", filtered, []int{7}, []string{netlab.Gateway4}},
		{"dns server by address", "http://" + netlab.DNS4 + "/", filtered, []int{7}, []string{netlab.DNS4}},
	}
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			r := n.sh(p.mode, timedCurl(p.curl))
			if r.code != 0 {
				t.Fatalf("%v", r)
			}
			got := parseTimed(t, r.stdout)[0]
			ok := false
			for _, rc := range p.rc {
				ok = ok || got[0] == rc
			}
			if !ok {
				t.Errorf("curl %s: exit %d, want one of %v: %v", p.curl, got[0], p.rc, r)
			}
			// A refusal is a reset or NXDOMAIN, not a timeout: a
			// generous bound that a hang (curl's 20 s) cannot meet.
			if got[1] > 2000 {
				t.Errorf("curl %s: refusal took %d ms", p.curl, got[1])
			}
			for _, a := range p.notReached {
				if n.lab.Reached(a) {
					t.Errorf("curl %s: a connection arrived at %s", p.curl, a)
				}
			}
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			last := lines[len(lines)-1]
			if !strings.Contains(last, "network: blocked") {
				t.Errorf("run's last stderr line does not name the refusal: %q", last)
			}
		})
	}
	// A name filtered mode does not allow is answered by the sandbox's
	// resolver: the question never leaves the host.
	if n.lab.Queried("other.test") {
		t.Error("filtered mode asked the lab's DNS server about other.test, a name it does not allow")
	}

	t.Run("hint and audit", func(t *testing.T) {
		r := n.sh(filtered, "curl -sS http://other.test/; curl -sS --max-time 20 http://"+netlab.Metadata4+"/; exit 0")
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		last := lines[len(lines)-1]
		for _, w := range []string{"other.test", "--allow-domain other.test", netlab.Metadata4} {
			if !strings.Contains(last, w) {
				t.Errorf("last stderr line %q lacks %q", last, w)
			}
		}
		out := n.a.run("audit", "--json")
		var entries []struct {
			Action, Sandbox, Details string
		}
		if err := json.Unmarshal([]byte(out.stdout), &entries); err != nil {
			t.Fatalf("audit --json: %v: %v", err, out)
		}
		var denies []string
		for _, e := range entries {
			if e.Action == "network_deny" {
				denies = append(denies, e.Details)
			}
		}
		joined := strings.Join(denies, "\n")
		if !strings.Contains(joined, "other.test") || !strings.Contains(joined, netlab.Metadata4) {
			t.Errorf("audit log lacks network_deny entries for other.test and %s: %q", netlab.Metadata4, joined)
		}
	})

	// The probes above can fail: what they refuse is reachable once
	// allowed.
	t.Run("controls", func(t *testing.T) {
		r := n.sh([]string{"--network", "full", "--allow-cidr", netlab.Metadata4 + "/32"}, "curl -sS http://"+netlab.Metadata4+"/")
		if r.code != 0 || !strings.Contains(r.stdout, "netlab metadata") || !n.lab.Reached(netlab.Metadata4) {
			t.Errorf("--allow-cidr did not open the metadata address: %v", r)
		}
		r = n.sh(full, "curl -sS http://"+netlab.Private4+"/")
		if r.code != 0 || !strings.Contains(r.stdout, "netlab private") {
			t.Errorf("full mode refused a private address: %v", r)
		}
		r = n.sh(full, "curl -sS http://other.test/")
		if r.code != 0 || !strings.Contains(r.stdout, "netlab web host=other.test") {
			t.Errorf("full mode refused an unblocked name: %v", r)
		}
	})
}

// TestNetworkDNSAtStart: a command that resolves a name as its very
// first action gets an answer, and nothing is reported refused: the
// sandbox's resolver must be serving before the sandbox's first packet
// is handled.
func TestNetworkDNSAtStart(t *testing.T) {
	n := newNetEnv(t)
	for i := 0; i < 6; i++ {
		r := n.sh(filtered, `s=$(date +%s%N); getent ahosts allowed.test >/dev/null && echo "resolved $(( ($(date +%s%N) - s) / 1000000 ))"`)
		f := strings.Fields(r.stdout)
		if r.code != 0 || len(f) != 2 || f[0] != "resolved" || strings.Contains(r.stderr, "blocked") {
			t.Fatalf("run %d: the first lookup failed or was refused: %v", i, r)
		}
		// A lost query costs the client its resolver timeout (5 s): a
		// generous bound that a lost packet cannot meet.
		if ms, _ := strconv.Atoi(f[1]); ms > 2000 {
			t.Errorf("run %d: the first lookup took %d ms", i, ms)
		}
	}
}

// TestNetworkNameMismatch: a TLS server name or HTTP Host that is not a
// name the address came from is refused: nothing the client sent reaches
// the server.
func TestNetworkNameMismatch(t *testing.T) {
	n := newNetEnv(t)
	w1 := netlab.Web4(1)
	// Each script first resolves allowed.test through the sandbox's
	// resolver, so that its address is one the sandbox may connect to and
	// only the name presented decides.
	const resolve = "getent ahosts allowed.test >/dev/null || exit 99; "
	rec := strconv.Itoa(netlab.PortRecorder)
	for _, c := range []struct {
		name, script, forbidden string
		mode                    []string
	}{
		// other.test's SNI to allowed.test's address (domain fronting).
		{"sni of another name", "curl -sS --max-time 20 --resolve other.test:443:" + w1 + " https://other.test/", "other.test", filtered},
		// allowed.test's SNI to an address allowed.test never resolved to.
		{"sni to a foreign address", "curl -sS --max-time 20 --resolve allowed.test:443:" + netlab.Web4(2) + " https://allowed.test/", "", filtered},
		{"host of another name", "curl -sS --max-time 20 -H 'Host: other.test' http://allowed.test/", "other.test", filtered},
		{"host of an IP literal", "curl -sS --max-time 20 -H 'Host: " + netlab.Web4(2) + "' http://allowed.test/", netlab.Web4(2), filtered},
		{"blocked sni in full", "curl -sS --max-time 20 --resolve blocked.test:443:" + w1 + " https://blocked.test/", "blocked.test", full},
		{"blocked host in full", "curl -sS --max-time 20 -H 'Host: blocked.test' http://allowed.test/", "blocked.test", full},
		{"sni of another name, recorder", "curl -sS --max-time 20 --resolve other.test:" + rec + ":" + w1 + " https://other.test:" + rec + "/", "", filtered},
		{"host of another name, recorder", "curl -sS --max-time 20 -H 'Host: other.test' http://allowed.test:" + rec + "/", "", filtered},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(n.lab.Accepted())
			r := n.sh(c.mode, resolve+c.script)
			if r.code == 0 || r.code == 99 || strings.Contains(r.stdout, "netlab") {
				t.Errorf("went through: %v", r)
			}
			for _, q := range n.lab.Requests() {
				if c.forbidden != "" && (q.Host == c.forbidden || q.SNI == c.forbidden) {
					t.Errorf("the lab answered a request for %s: %+v", c.forbidden, q)
				}
			}
			// The recorder logs a connection when it has read what came
			// within a second: nothing may have come.
			time.Sleep(1200 * time.Millisecond)
			for _, a := range n.lab.Accepted()[before:] {
				if len(a.First) > 0 {
					t.Errorf("the recorder got %q", a.First)
				}
			}
		})
	}
	// Controls: the same requests with matching names go through.
	before := len(n.lab.Accepted())
	r := n.sh(filtered, resolve+"curl -sS --resolve allowed.test:443:"+w1+" https://allowed.test/ && curl -sS -H 'Host: allowed.test' http://allowed.test/ && curl -sS --http0.9 -H 'Host: allowed.test' http://allowed.test:"+rec+"/")
	if r.code != 0 || strings.Count(r.stdout, webMarker) != 2 || !strings.Contains(r.stdout, "netlab recorder") {
		t.Errorf("matching names refused: %v", r)
	}
	time.Sleep(1200 * time.Millisecond)
	got := false
	for _, a := range n.lab.Accepted()[before:] {
		got = got || strings.Contains(string(a.First), "Host: allowed.test")
	}
	if !got {
		t.Error("the recorder did not get the allowed request")
	}
}

// TestNetworkUDPAndIPv6: UDP other than DNS is refused unless allowed;
// IPv6 works.
func TestNetworkUDPAndIPv6(t *testing.T) {
	n := newNetEnv(t)
	udp := `python3 -c '
import socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
s.settimeout(1.5)
try:
    s.sendto(b"exfiltrate", (sys.argv[1], 7))
    print("echo", s.recvfrom(100)[0].decode())
except Exception as e:
    print("no echo", type(e).__name__)
' `
	r := n.sh(full, udp+netlab.Web4(1)+"; "+udp+netlab.Web6(1))
	if r.code != 0 || strings.Contains(r.stdout, "echo exfiltrate") {
		t.Errorf("UDP went through: %v", r)
	}
	if d := n.lab.UDPReceived(); len(d) != 0 {
		t.Errorf("the lab's echo server got %d datagrams: %+v", len(d), d)
	}
	// Control: allow_udp lets it through.
	cfg := filepath.Join(n.a.dir, "agentkernel.toml")
	if err := os.WriteFile(cfg, []byte("[network]\nallow_udp = [\""+netlab.Web4(1)+":7\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The network is in use before the datagram (TestNetworkDNSAtStart
	// covers the first packet of a run).
	r = n.sh(full, touchNet+"; "+udp+netlab.Web4(1))
	if r.code != 0 || !strings.Contains(r.stdout, "echo exfiltrate") {
		t.Errorf("allow_udp did not open %s:7: %v", netlab.Web4(1), r)
	}
	os.Remove(cfg)

	r = n.sh(filtered, "curl -6 -sS https://v6only.test/ && curl -6 -sS https://allowed.test/")
	if r.code != 0 || !strings.Contains(r.stdout, "local=["+netlab.Web6(6)+"]:443") || !strings.Contains(r.stdout, "local=["+netlab.Web6(1)+"]:443") {
		t.Errorf("IPv6: %v", r)
	}
}

// TestNetworkPublish: -P publishes a sandbox port in the namespace
// agentkernel runs in.
func TestNetworkPublish(t *testing.T) {
	n := newNetEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := os.WriteFile(filepath.Join(n.a.dir, "published.txt"), []byte("from the sandbox\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := n.a.cmd(ctx, n.args([]string{"--network", "filtered", "-P", "18080:8000"}, "python3", "-m", "http.server", "-d", "/workspace", "8000")...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, stderr)
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: n.lab.DialContext}}
	var body string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := client.Get("http://127.0.0.1:18080/published.txt")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if body != "from the sandbox\n" {
		t.Fatalf("published port: got %q", body)
	}
	// Published on 127.0.0.1 only, by default.
	if c, err := n.lab.DialContext(ctx, "tcp", net.JoinHostPort(netlab.Client4, "18080")); err == nil {
		c.Close()
		t.Error("a port published without an address listens beyond 127.0.0.1")
	}
}

// TestNetworkNone: --network none is loopback only.
func TestNetworkNone(t *testing.T) {
	n := newNetEnv(t)
	for _, mode := range [][]string{{"--network", "none"}, {"--no-network"}} {
		r := n.sh(mode, "ls /sys/class/net; cat /etc/resolv.conf 2>/dev/null | grep -c 10.0.2.3; curl -sS --max-time 5 http://"+netlab.Web4(1)+"/ >/dev/null 2>&1; echo curl=$?")
		if r.stdout == "" || !strings.HasPrefix(r.stdout, "lo\n") || strings.Contains(r.stdout, "eth0") || !strings.Contains(r.stdout, "curl=7") {
			t.Errorf("%v: %v", mode, r)
		}
	}
}

// touchNet uses the network (by address: no lookup), so that the run
// starts its network helper (which starts on the sandbox's first packet).
var touchNet = "curl -sS -o /dev/null http://" + netlab.Web4(1) + "/"

// TestNetworkNoLeak: many runs that use the network leave no helper
// process, no link and no mount behind.
func TestNetworkNoLeak(t *testing.T) {
	// 50 runs by default keep the suite's run time down on a small
	// machine; .ci/run runs it again with AGENTKERNEL_NET_LEAK_RUNS=1000.
	runs := 50
	if testing.Short() {
		runs = 10
	}
	if s := os.Getenv("AGENTKERNEL_NET_LEAK_RUNS"); s != "" {
		runs, _ = strconv.Atoi(s)
	}
	n := newNetEnv(t)
	links := func() string {
		out, err := exec.Command("ip", "-n", n.lab.ClientNS(), "-o", "link").CombinedOutput()
		if err != nil {
			t.Fatalf("ip link: %v: %s", err, out)
		}
		var names []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(line); len(f) > 1 {
				names = append(names, f[1])
			}
		}
		return strings.Join(names, " ")
	}
	// One run first: what a run sets up once per process (image cache,
	// data dir) is there before the counts are taken.
	if r := n.sh(full, touchNet); r.code != 0 {
		t.Fatal(r)
	}
	// The scan for helpers sees one while a run is on.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bg := n.a.cmd(ctx, n.args(full, "sh", "-c", touchNet+"; sleep 3")...)
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	seen := false
	for i := 0; i < 50 && !seen; i++ {
		for _, p := range helperProcesses(t) {
			seen = seen || strings.Contains(p, "agentkernel-netstack")
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = bg.Wait()
	if !seen {
		t.Fatal("no agentkernel-netstack process seen during a run with network on")
	}
	ours := []string{n.a.dataDir, n.a.dir, n.a.home, filepath.Dir(binary)}
	linksBefore, mountsBefore := links(), mountsOf(t, ours)
	start := time.Now()
	for i := 0; i < runs; i++ {
		r := n.a.run(n.args(full, "sh", "-c", touchNet)...)
		if r.code != 0 {
			t.Fatalf("run %d: %v", i, r)
		}
	}
	t.Logf("%d runs with network on in %v (%v each)", runs, time.Since(start).Round(time.Millisecond), (time.Since(start) / time.Duration(runs)).Round(time.Millisecond))
	if p := helperProcesses(t); len(p) != 0 {
		t.Errorf("network helpers left running: %v", p)
	}
	if got := links(); got != linksBefore {
		t.Errorf("links in the client namespace changed:\nbefore:\n%s\nafter:\n%s", linksBefore, got)
	}
	if got := mountsOf(t, ours); len(got) != len(mountsBefore) {
		t.Errorf("mounts under the run's directories: %d before, %d after:\n%s", len(mountsBefore), len(got), strings.Join(got, "\n"))
	}

	// Through a daemon, which owns its pooled sandboxes' helpers for as
	// long as it lives: after the runs it holds the descriptors it held
	// before them (a TUN device, a helper's socket or a sandbox's
	// namespace kept by mistake is one), and no helper is left.
	if r := n.a.run("daemon", "start"); r.code != 0 {
		t.Fatalf("daemon start: %v", r)
	}
	defer n.a.run("daemon", "stop")
	for i := 0; i < 3; i++ { // the spec's pool is made and warm
		if r := n.sh(full, touchNet); r.code != 0 {
			t.Fatalf("daemon run: %v", r)
		}
	}
	pid, ready := daemonState(t, n.a)
	fds := func() int {
		// The pool refills after each run: wait until it is as full as
		// it was before counting.
		for i := 0; i < 100; i++ {
			if _, r := daemonState(t, n.a); r == ready {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	fdsBefore := fds()
	hitsBefore := daemonHits(t, n.a)
	start = time.Now()
	for i := 0; i < runs; i++ {
		if r := n.sh(full, touchNet); r.code != 0 {
			t.Fatalf("daemon run %d: %v", i, r)
		}
	}
	t.Logf("%d daemon runs with network on in %v", runs, time.Since(start).Round(time.Millisecond))
	if hits := daemonHits(t, n.a) - hitsBefore; hits < runs/2 {
		t.Errorf("only %d of %d runs came from the daemon's warm pool", hits, runs)
	}
	// A few descriptors of slack: the runtime's own (a timer, the poller)
	// may come and go; a leak per run would be runs of them.
	if got := fds(); got > fdsBefore+4 {
		t.Errorf("the daemon holds %d descriptors after %d runs with network on, %d before", got, runs, fdsBefore)
	}
	for _, p := range helperProcesses(t) {
		if strings.Contains(p, "agentkernel-netstack") {
			t.Errorf("network helper left running after the daemon's runs: %s", p)
		}
	}
}

// daemonState is the running daemon's PID and how many sandboxes its
// pools hold ready.
func daemonState(t *testing.T, a *ak) (pid, ready int) {
	t.Helper()
	r := a.run("daemon", "status", "--json")
	var st struct {
		PID   int
		Pools []struct{ Ready int }
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.PID == 0 {
		t.Fatalf("daemon status --json: %v %v", r, err)
	}
	for _, p := range st.Pools {
		ready += p.Ready
	}
	return st.PID, ready
}

// daemonHits is how many runs the daemon served from a warm sandbox.
func daemonHits(t *testing.T, a *ak) int {
	t.Helper()
	r := a.run("daemon", "status", "--json")
	var st struct {
		PoolRuns map[string]int `json:"pool_runs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("daemon status --json: %v %v", r, err)
	}
	return st.PoolRuns["hit"]
}

// mountsOf lists the host's mounts under the given directories.
func mountsOf(t *testing.T, dirs []string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, d := range dirs {
			if strings.Contains(line, d) {
				found = append(found, line)
				break
			}
		}
	}
	return found
}

// helperProcesses lists the processes started from this test's
// binaries: network helpers (argv0 agentkernel-netstack) and sandbox
// inits.
func helperProcesses(t *testing.T) []string {
	var found []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || !strings.HasPrefix(exe, filepath.Dir(binary)+"/") {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		found = append(found, fmt.Sprintf("%s: %q", e.Name(), strings.ReplaceAll(string(b), "\x00", " ")))
	}
	return found
}

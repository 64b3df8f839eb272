//go:build linux

package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/testenv/netlab"
)

// The network of -B gvisor: agentkernel runs in a netlab's client
// namespace, as the native backend's network tests run it, with the
// busybox test image (pulled first, outside the lab, from the in-process
// registry on the host's loopback) and busybox's wget as the client
// inside gVisor (without -T: busybox wget with a timeout dies of
// SIGSEGV under gVisor), plus a static Go client for HTTPS.

// gvNetEnv is withGVisor with its runs in a lab's client namespace.
func gvNetEnv(t *testing.T) (*ak, string, *netlab.Lab) {
	t.Helper()
	a, ref := withGVisor(t)
	lab := netlab.New(t)
	a.wrap = labWrap(lab.ClientNS())
	return a, ref, lab
}

// gvSh runs script under sh -c in a gvisor sandbox of the cached test
// image with the policy flags given.
func gvSh(a *ak, ref string, policy []string, script string) result {
	a.t.Helper()
	return a.gv(ref, append([]string{"--pull", "never"}, policy...), "sh", "-c", script)
}

// wgetRC prints wget's exit status for url: 0 fetched, else refused.
func wgetRC(url string) string {
	return "wget -q -O /dev/null " + url + "; echo rc=$?"
}

func TestGVisorNetwork(t *testing.T) {
	a, ref, lab := gvNetEnv(t)

	t.Run("allowed name", func(t *testing.T) {
		for _, mode := range [][]string{filtered, full} {
			r := gvSh(a, ref, mode, "cat /etc/resolv.conf; wget -q -O - http://allowed.test/")
			if r.code != 0 || !strings.Contains(r.stdout, "nameserver 10.0.2.3") || !strings.Contains(r.stdout, "netlab web host=allowed.test") {
				t.Fatalf("%v: %v", mode, r)
			}
			if strings.Contains(r.stderr, "blocked") || strings.Contains(r.stderr, "loopback only") {
				t.Errorf("%v: an allowed run reported a refusal or a fallback: %v", mode, r)
			}
		}
	})

	t.Run("https from a Go client", func(t *testing.T) {
		gocl := buildGoClient(t)
		policy := append([]string{"-v", gocl + ":/tmp/netclient:ro", "-v", lab.CAFile() + ":" + labCA + ":ro", "-e", "SSL_CERT_FILE=" + labCA}, filtered...)
		r := gvSh(a, ref, policy, "/tmp/netclient https://allowed.test/")
		if r.code != 0 || !strings.Contains(r.stdout, webMarker) {
			t.Fatalf("%v", r)
		}
		seen := false
		for _, q := range lab.Requests() {
			seen = seen || (q.Host == "allowed.test" && q.SNI == "allowed.test")
		}
		if !seen {
			t.Fatal("the lab's web server never saw the HTTPS request for allowed.test")
		}
	})

	// The same refusals as native's, from the same policy engine: what
	// gVisor's stack sends goes through the helper like anything else.
	type probe struct {
		name, url  string
		mode       []string
		notReached []string
	}
	probes := []probe{
		{"filtered name NXDOMAIN", "http://other.test/", filtered, []string{netlab.Web4(2), netlab.Web6(2)}},
		{"filtered address of an unallowed name", "http://" + netlab.Web4(2) + "/", filtered, []string{netlab.Web4(2)}},
		{"full blocked name", "http://blocked.test/", full, []string{netlab.Web4(3), netlab.Web6(3)}},
		{"metadata v4", "http://" + netlab.Metadata4 + "/", full, []string{netlab.Metadata4}},
		{"metadata alibaba", "http://" + netlab.MetadataAl + "/", full, []string{netlab.MetadataAl}},
		{"metadata name", "http://meta.test/", full, []string{netlab.Metadata4, netlab.Metadata6}},
		{"private filtered", "http://" + netlab.Private4 + "/", filtered, []string{netlab.Private4}},
		{"private name filtered", "http://private.test/", append(filtered, "--allow-domain", "private.test"), []string{netlab.Private4, netlab.Private6}},
		{"host address", "http://" + netlab.Client4 + "/", full, []string{netlab.Client4}},
		{"host name", "http://host.test/", full, []string{netlab.Client4, netlab.Client6}},
		{"host gateway address", "http://" + netlab.Gateway4 + "/", filtered, []string{netlab.Gateway4}},
		{"rebind to loopback", "http://rebind.test/", full, []string{"127.0.0.1", "::1"}},
	}
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			r := gvSh(a, ref, p.mode, wgetRC(p.url))
			if r.code != 0 || !strings.Contains(r.stdout, "rc=") || strings.Contains(r.stdout, "rc=0") {
				t.Fatalf("wget %s was not refused: %v", p.url, r)
			}
			for _, addr := range p.notReached {
				if lab.Reached(addr) {
					t.Errorf("wget %s: a connection arrived at %s", p.url, addr)
				}
			}
			if !strings.Contains(r.stderr, "network: blocked") {
				t.Errorf("the run did not name the refusal: %v", r)
			}
		})
	}
	if lab.Queried("other.test") {
		t.Error("filtered mode asked the lab's DNS server about other.test, a name it does not allow")
	}

	// What the probes refuse is reachable once allowed: they can fail.
	t.Run("controls", func(t *testing.T) {
		r := gvSh(a, ref, []string{"--network", "full", "--allow-cidr", netlab.Metadata4 + "/32"}, "wget -q -O - http://"+netlab.Metadata4+"/")
		if r.code != 0 || !strings.Contains(r.stdout, "netlab metadata") || !lab.Reached(netlab.Metadata4) {
			t.Errorf("--allow-cidr did not open the metadata address: %v", r)
		}
		r = gvSh(a, ref, full, "wget -q -O - http://"+netlab.Private4+"/")
		if r.code != 0 || !strings.Contains(r.stdout, "netlab private") {
			t.Errorf("full mode refused a private address: %v", r)
		}
	})

	t.Run("none is loopback only", func(t *testing.T) {
		r := gvSh(a, ref, []string{"--network", "none"}, "ls /sys/class/net; "+wgetRC("http://"+netlab.Web4(1)+"/"))
		if r.code != 0 || strings.Contains(r.stdout, "eth0") || strings.Contains(r.stdout, "rc=0") {
			t.Errorf("%v", r)
		}
	})
}

// TestGVisorPublish: a port published with -P is reachable from the
// host's loopback (the lab's client namespace, where agentkernel runs),
// and only there.
func TestGVisorPublish(t *testing.T) {
	a, ref, lab := gvNetEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := a.cmd(ctx, "run", "-B", "gvisor", "--image", ref, "--pull", "never", "--network", "filtered", "-P", "18080:8000", "--",
		"sh", "-c", "mkdir -p /tmp/www && echo from the sandbox > /tmp/www/published.txt && exec httpd -f -p 8000 -h /tmp/www")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var errOut strings.Builder
	copied := make(chan struct{})
	go func() { io.Copy(&errOut, stderr); close(copied) }()
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: lab.DialContext}}
	var body string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := client.Get("http://127.0.0.1:18080/published.txt")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if body != "from the sandbox\n" {
		_ = cmd.Process.Signal(os.Interrupt)
		<-copied
		t.Fatalf("published port: got %q; stderr: %s", body, errOut.String())
	}
	if c, err := lab.DialContext(ctx, "tcp", net.JoinHostPort(netlab.Client4, "18080")); err == nil {
		c.Close()
		t.Error("a port published without an address listens beyond 127.0.0.1")
	}
}

// TestGVisorNetworkAttack: from inside gVisor, with --network full and
// root in the sandbox, the host's own services (the lab's client
// namespace, where agentkernel runs: its loopback and its addresses) and
// the lab's private marker server stay out of reach, whatever address
// or name the sandbox uses. The positive control is the same server
// reached from the host side.
func TestGVisorNetworkAttack(t *testing.T) {
	a, ref, lab := gvNetEnv(t)
	// Control: the host's server answers on its loopback, from the host.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: lab.DialContext}}
	resp, err := client.Get("http://127.0.0.1/")
	if err != nil {
		t.Fatalf("control: the host's loopback server: %v", err)
	}
	resp.Body.Close()
	if !lab.Reached("127.0.0.1") {
		t.Fatal("control: the lab did not record the host-side connection to 127.0.0.1")
	}
	before := len(lab.Accepted())
	targets := []string{
		"http://10.0.2.2/",                 // the gateway: the helper itself
		"http://10.0.2.3/",                 // the resolver's address
		"http://[fd00::2]/",                // the IPv6 gateway
		"http://" + netlab.Client4 + "/",   // the host's address
		"http://[" + netlab.Client6 + "]/", // the host's IPv6 address
		"http://host.test/",                // a name for it
		"http://rebind.test/",              // a name for 127.0.0.1
		"http://localhost/",                // the sandbox's own loopback
	}
	// The private ranges are closed in filtered mode (full opens them).
	private := []string{"http://" + netlab.Private4 + "/", "http://[" + netlab.Private6 + "]/", "http://private.test/"}
	script := func(targets []string) string {
		var s strings.Builder
		for _, u := range targets {
			s.WriteString("wget -q -O - " + u + " 2>/dev/null | grep -q netlab && echo REACHED " + u + "; ")
		}
		return s.String() + "echo done"
	}
	for _, c := range []struct {
		mode    []string
		targets []string
	}{
		{[]string{"--network", "full"}, targets},
		{append(filtered, "--allow-domain", "private.test", "--allow-domain", "host.test"), append(targets, private...)},
	} {
		mode := c.mode
		r := gvSh(a, ref, mode, script(c.targets))
		if r.code != 0 || !strings.Contains(r.stdout, "done") {
			t.Fatalf("%v: %v", mode, r)
		}
		if strings.Contains(r.stdout, "REACHED") {
			t.Errorf("%v: the sandbox reached the host or a private server:\n%s", mode, r.stdout)
		}
	}
	for _, acc := range lab.Accepted()[before:] {
		t.Errorf("a connection from the sandbox arrived at %v", acc.Local)
	}
}

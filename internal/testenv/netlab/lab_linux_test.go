package netlab

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// needTool ends t through testenv.Missing unless name is on PATH.
func needTool(t *testing.T, name, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		testenv.Missing(t, "%s not found (Debian package %s)", name, pkg)
	}
}

// inClient runs name in the lab's client namespace and returns its
// standard output; a failure fails t with what it printed.
func inClient(t *testing.T, l *Lab, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := l.Command(ctx, name, args...)
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout: %s\nstderr: %s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func wantContains(t *testing.T, what, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Fatalf("%s: got %q, want it to contain %q", what, got, want)
	}
}

func TestLab(t *testing.T) {
	l := New(t, WithTTL(5*time.Second))

	t.Run("dns", func(t *testing.T) {
		ctx := context.Background()
		r := l.Resolver()
		got, err := r.LookupNetIP(ctx, "ip", "allowed.test")
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(got, netip.Addr.Compare)
		if want := []netip.Addr{Addr(Web4(1)), Addr(Web6(1))}; !slices.Equal(got, want) {
			t.Fatalf("allowed.test: %v, want %v", got, want)
		}
		_, err = r.LookupNetIP(ctx, "ip", "nowhere.example")
		var de *net.DNSError
		if !errors.As(err, &de) || !de.IsNotFound {
			t.Fatalf("nowhere.example: %v, want NXDOMAIN", err)
		}
		if !l.Queried("nowhere.example") {
			t.Fatal("the query for nowhere.example was not logged")
		}
		l.AddName("Added.Test.", "198.18.1.7")
		got, err = r.LookupNetIP(ctx, "ip4", "added.test")
		if err != nil || len(got) != 1 || got[0] != Addr(Web4(7)) {
			t.Fatalf("added.test: %v %v, want 198.18.1.7", got, err)
		}
		l.RemoveName("added.test")
		if _, err := r.LookupNetIP(ctx, "ip", "added.test"); err == nil {
			t.Fatal("added.test still resolves after RemoveName")
		}
		var ttl uint32
		if err := l.InClient(func() error {
			m := new(dns.Msg)
			m.SetQuestion("other.test.", dns.TypeA)
			a, err := dns.Exchange(m, net.JoinHostPort(DNS4, "53"))
			if err == nil && len(a.Answer) == 1 {
				ttl = a.Answer[0].Header().Ttl
			}
			return err
		}); err != nil || ttl != 5 {
			t.Fatalf("other.test: TTL %d (%v), want WithTTL's 5", ttl, err)
		}
		got, err = r.LookupNetIP(ctx, "ip", "rebind.test")
		if err != nil || !slices.Contains(got, netip.MustParseAddr("127.0.0.1")) {
			t.Fatalf("rebind.test: %v %v", got, err)
		}
	})

	t.Run("curl", func(t *testing.T) {
		needTool(t, "curl", "curl")
		// Command drops the caller's proxy settings.
		t.Setenv("https_proxy", "http://127.0.0.1:1")
		t.Setenv("HTTPS_PROXY", "http://127.0.0.1:1")
		out := inClient(t, l, nil, "curl", "-sS", "-4", "--max-time", "30", "https://allowed.test/")
		wantContains(t, "curl https://allowed.test/", out, "netlab web host=allowed.test sni=allowed.test local=198.18.1.1:443")
		out = inClient(t, l, nil, "curl", "-sS", "-6", "--max-time", "30", "https://allowed.test/")
		wantContains(t, "curl -6", out, "local=[2001:2::1:1]:443")
		out = inClient(t, l, nil, "curl", "-sS", "--max-time", "30", "https://v6only.test/")
		wantContains(t, "curl v6only.test", out, "local=[2001:2::1:6]:443")
		out = inClient(t, l, nil, "curl", "-sS", "--max-time", "30", "http://169.254.169.254/latest/meta-data/")
		wantContains(t, "curl metadata", out, "netlab metadata")
		if !l.Reached(Metadata4) {
			t.Fatal("the metadata server logged no connection")
		}
	})

	t.Run("python", func(t *testing.T) {
		needTool(t, "python3", "python3")
		out := inClient(t, l, nil, "python3", "-c",
			"import urllib.request; print(urllib.request.urlopen('https://other.test/py', timeout=30).read().decode())")
		wantContains(t, "python urllib", out, "netlab web host=other.test sni=other.test")
	})

	t.Run("node", func(t *testing.T) {
		needTool(t, "node", "nodejs")
		out := inClient(t, l, nil, "node", "-e",
			"fetch('https://allowed.test/node').then(r => r.text()).then(t => console.log(t), e => { console.error(e); process.exit(1) })")
		wantContains(t, "node fetch", out, "netlab web host=allowed.test sni=allowed.test")
	})

	t.Run("go", func(t *testing.T) {
		c := l.HTTPClient()
		defer c.CloseIdleConnections()
		for url, want := range map[string]string{
			"https://other.test/":                    "netlab web host=other.test sni=other.test local=198.18.1.2:443",
			"http://meta.test/latest/meta-data/":     "netlab metadata",
			"http://[fd00:ec2::254]/":                "netlab metadata",
			"http://100.100.100.200/":                "netlab metadata",
			"http://10.77.0.5/":                      "netlab private",
			"http://[fd77::5]/":                      "netlab private",
			"http://100.64.0.5/":                     "netlab private",
			"http://rebind.test/":                    "netlab host host=rebind.test",
			"http://[::1]/":                          "netlab host",
			"http://host.test/":                      "netlab host",
			"https://198.18.1.3/":                    "netlab web host=198.18.1.3 sni=",
			"http://sub.allowed.test/simple/nothing": "", // 404 from the index
		} {
			resp, err := c.Get(url)
			if err != nil {
				t.Fatalf("GET %s: %v", url, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want == "" {
				if resp.StatusCode != http.StatusNotFound {
					t.Fatalf("GET %s: %s, want 404", url, resp.Status)
				}
				continue
			}
			wantContains(t, "GET "+url, string(body), want)
		}
		// Only the lab's CA makes the lab's certificates valid.
		strict := &http.Client{Transport: &http.Transport{DialContext: l.DialContext}}
		defer strict.CloseIdleConnections()
		if _, err := strict.Get("https://allowed.test/"); err == nil {
			t.Fatal("a client without the lab's CA accepted the lab's certificate")
		}
	})

	t.Run("pip", func(t *testing.T) {
		needTool(t, "python3", "python3")
		if err := exec.Command("python3", "-m", "pip", "--version").Run(); err != nil {
			testenv.Missing(t, "python3 -m pip: %v (Debian package python3-pip)", err)
		}
		dir := t.TempDir()
		env := []string{"PIP_CONFIG_FILE=/dev/null", "PIP_NO_CACHE_DIR=1", "PIP_DISABLE_PIP_VERSION_CHECK=1", "PYTHONNOUSERSITE=1"}
		inClient(t, l, env, "python3", "-m", "pip", "download", "-q", "--no-deps", "--index-url", PyPIIndex("allowed.test"),
			"-d", filepath.Join(dir, "dl"), PythonPackage)
		whl, _ := filepath.Glob(filepath.Join(dir, "dl", "*.whl"))
		if len(whl) != 1 {
			t.Fatalf("pip download left %v", whl)
		}
		target := filepath.Join(dir, "target")
		inClient(t, l, env, "python3", "-m", "pip", "install", "-q", "--no-deps", "--index-url", PyPIIndex("allowed.test"),
			"--target", target, PythonPackage+"=="+PythonVersion)
		out := inClient(t, l, env, "python3", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import netlab_hello; print(netlab_hello.GREETING)", target)
		wantContains(t, "the installed wheel", out, PythonGreeting)
	})

	t.Run("npm", func(t *testing.T) {
		needTool(t, "npm", "npm")
		dir := t.TempDir()
		env := []string{
			"npm_config_cache=" + filepath.Join(dir, "cache"),
			"npm_config_userconfig=" + filepath.Join(dir, "npmrc"),
			"npm_config_update_notifier=false",
			"HOME=" + dir,
		}
		inClient(t, l, env, "npm", "install", "--registry", NPMRegistry("allowed.test"), "--no-audit", "--no-fund",
			"--prefix", dir, NPMPackage)
		out := inClient(t, l, env, "node", "-e", "console.log(require(process.argv[1]).greeting)", filepath.Join(dir, "node_modules", NPMPackage))
		wantContains(t, "the installed npm package", out, NPMGreeting)
	})

	t.Run("git", func(t *testing.T) {
		needTool(t, "git", "git")
		dir := t.TempDir()
		env := []string{"HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0"}
		clone := filepath.Join(dir, "clone")
		inClient(t, l, env, "git", "clone", "-q", GitURL("allowed.test"), clone)
		b, err := os.ReadFile(filepath.Join(clone, GitFile))
		if err != nil || string(b) != GitContent {
			t.Fatalf("cloned %s: %q %v", GitFile, b, err)
		}
		head := strings.TrimSpace(inClient(t, l, env, "git", "-C", clone, "rev-parse", "HEAD"))
		if head != l.GitHead() {
			t.Fatalf("cloned HEAD %s, want %s", head, l.GitHead())
		}
	})

	t.Run("udp-echo", func(t *testing.T) {
		for _, s := range []string{Web4(1), Web6(1), Metadata4} {
			a := Addr(s)
			var got []byte
			err := l.InClient(func() error {
				c, err := net.Dial("udp", netip.AddrPortFrom(a, PortEcho).String())
				if err != nil {
					return err
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := c.Write([]byte("ping " + a.String())); err != nil {
					return err
				}
				buf := make([]byte, 100)
				n, err := c.Read(buf)
				got = buf[:n]
				return err
			})
			if err != nil || string(got) != "ping "+a.String() {
				t.Fatalf("echo on %s: %q %v", a, got, err)
			}
			found := false
			for _, d := range l.UDPReceived() {
				found = found || (d.Local == netip.AddrPortFrom(a, PortEcho) && d.Remote.Addr().Is4() == a.Is4() && string(d.Payload) == "ping "+a.String())
			}
			if !found {
				t.Fatalf("echo on %s: datagram not logged: %v", a, l.UDPReceived())
			}
		}
	})

	t.Run("recorder", func(t *testing.T) {
		ctx := context.Background()
		c, err := l.DialContext(ctx, "tcp", net.JoinHostPort("other.test", "9000"))
		if err != nil {
			t.Fatal(err)
		}
		// A TLS client hello naming a name that is not the address's.
		tc := tls.Client(c, &tls.Config{ServerName: "sni-mismatch.test", InsecureSkipVerify: true})
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		_ = tc.Handshake() // the recorder does not speak TLS
		tc.Close()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var rec []Accepted
			for _, a := range l.Accepted() {
				if a.Service == "recorder" {
					rec = append(rec, a)
				}
			}
			if len(rec) > 0 {
				if !bytes.Contains(rec[0].First, []byte("sni-mismatch.test")) || rec[0].Local != netip.AddrPortFrom(Addr(Web4(2)), PortRecorder) {
					t.Fatalf("recorder: %+v", rec[0])
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the recorder logged no connection")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	t.Run("sink-source", func(t *testing.T) {
		ctx := context.Background()
		const n = 4 << 20
		c, err := l.DialContext(ctx, "tcp", net.JoinHostPort(Web4(1), "5001"))
		if err != nil {
			t.Fatal(err)
		}
		before := l.Sunk()
		if _, err := c.Write(make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		c.Close()
		for deadline := time.Now().Add(10 * time.Second); l.Sunk()-before < n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("sink read %d bytes, want %d", l.Sunk()-before, n)
			}
		}
		s, err := l.DialContext(ctx, "tcp6", net.JoinHostPort(Web6(1), "5002"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_ = s.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.CopyN(io.Discard, s, n); err != nil {
			t.Fatalf("source: %v", err)
		}
	})
}

// TestSweepStale: a lab removes the namespaces a lab of a process that
// is gone left behind, and only those.
func TestSweepStale(t *testing.T) {
	testenv.RequireRoot(t)
	needTool(t, "ip", "iproute2")
	// A process that is gone: a child that has exited and been reaped.
	child := exec.Command("true")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("netlab-%d-0000stale-client", child.Process.Pid)
	mine := fmt.Sprintf("netlab-%d-0000alive-client", os.Getpid())
	for _, ns := range []string{stale, mine} {
		if err := ipCmd("", "netns", "add", ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ipCmd("", "netns", "del", ns) })
	}
	if err := os.MkdirAll("/etc/netns/"+stale, 0o755); err != nil {
		t.Fatal(err)
	}
	New(t)
	if _, err := os.Stat("/run/netns/" + stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stale namespace %s is still there (%v)", stale, err)
	}
	if _, err := os.Stat("/etc/netns/" + stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/etc/netns/%s is still there (%v)", stale, err)
	}
	if _, err := os.Stat("/run/netns/" + mine); err != nil {
		t.Errorf("the namespace of a live process was removed: %v", err)
	}
}

// TestCleanup proves that a lab leaves nothing behind: no namespace, no
// resolv.conf, no link in the caller's namespace, no goroutine, no
// descriptor.
func TestCleanup(t *testing.T) {
	testenv.RequireRoot(t)
	needTool(t, "ip", "iproute2")
	links := func() string {
		out, err := exec.Command("ip", "-o", "link", "show").Output()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			// Other packages' labs come and go meanwhile when the suite
			// runs packages side by side: kubelab's node bridges and
			// world links (akl...) and its pods' CNI veths (veth...,
			// "vethX@ifN:"). This lab makes its links in its own
			// namespaces, never here, under neither prefix.
			if strings.HasPrefix(f[1], "akl") || strings.HasPrefix(f[1], "veth") {
				continue
			}
			names = append(names, f[1])
		}
		return strings.Join(names, " ")
	}
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	// A first lab, so that what the runtime and packages open once
	// (the poller, caches) is there before counting.
	t.Run("warm", func(t *testing.T) { New(t) })

	linksBefore, fdsBefore, goBefore := links(), fds(), runtime.NumGoroutine()
	var l *Lab
	t.Run("lab", func(t *testing.T) {
		l = New(t)
		c := l.HTTPClient()
		resp, err := c.Get("https://allowed.test/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		c.CloseIdleConnections()
		if linksBefore != links() {
			t.Fatalf("the lab added links to the caller's namespace: %s, was %s", links(), linksBefore)
		}
		for _, p := range []string{"/run/netns/" + l.InetNS(), l.ClientNSPath(), "/etc/netns/" + l.ClientNS() + "/resolv.conf", l.CAFile()} {
			if _, err := os.Stat(p); err != nil {
				t.Fatal(err)
			}
		}
	})
	if l == nil {
		return // New ended the subtest (skipped or failed)
	}
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{l.InetNS(), l.ClientNS()} {
		if strings.Contains(string(out), ns) {
			t.Errorf("namespace %s left: %s", ns, out)
		}
	}
	for _, p := range []string{"/run/netns/" + l.InetNS(), l.ClientNSPath(), "/etc/netns/" + l.ClientNS(), filepath.Dir(l.CAFile())} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left (%v)", p, err)
		}
	}
	if got := links(); got != linksBefore {
		t.Errorf("links: %s, were %s", got, linksBefore)
	}
	deadline := time.Now().Add(10 * time.Second)
	for fds() > fdsBefore || runtime.NumGoroutine() > goBefore {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("left: %d descriptors (were %d), %d goroutines (were %d)\n%s",
				fds(), fdsBefore, runtime.NumGoroutine(), goBefore, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package proxy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/agentkernel/agentkernel/internal/kubeegress"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// The tests build a pod's network the way a cluster does, from real
// parts: the test binary runs in a network namespace of its own (the
// "world": a DNS server and a web server on 198.18.7.1, the address of
// allowed.test, and a web server and two counters on 198.18.7.3, that
// of denied.test),
// joined by a veth to a second namespace (the "pod", 198.18.7.2, its
// default route through the world). In the pod, the real rules are
// written by "kube-egress init" (as root, as the init container), the
// real proxy runs as "kube-egress serve" under the proxy's user without
// any capability (as the sidecar), and the sandbox's commands are
// busybox and curl run as root with every capability dropped (as a pod's
// sandbox container without CAP_NET_ADMIN).

const (
	worldAddr = "198.18.7.1"
	podAddr   = "198.18.7.2"
	// otherAddr is the world's second address: denied.test's, never one
	// an allowed name resolves to.
	otherAddr = "198.18.7.3"
	roleEnv   = "AKEGRESS_TEST_ROLE"
	argsEnv   = "AKEGRESS_TEST_ARGS"
	netnsEnv  = "AKEGRESS_TEST_NETNS"
)

var (
	setupErr error
	lab      *podLab
)

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "main":
		os.Exit(Main(strings.Fields(os.Getenv(argsEnv)), os.Stdout, os.Stderr))
	case "hold":
		// Holds the pod's network namespace until stdin closes.
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		setupErr = errors.New("needs root (network namespaces, veth, nftables)")
		os.Exit(m.Run())
	}
	if os.Getenv(netnsEnv) == "" {
		cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
		cmd.Env = append(os.Environ(), netnsEnv+"=1")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.Exited() {
			os.Exit(ee.ExitCode())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "test binary in its network namespace:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	lab, setupErr = newPodLab()
	code := m.Run()
	if lab != nil {
		lab.close()
	}
	os.Exit(code)
}

// podLab is the world, the pod and the proxy in it.
type podLab struct {
	dir      string // holds a copy of the test binary others may run
	exe      string
	holder   *exec.Cmd
	holdIn   io.WriteCloser
	netns    string
	proxy    *exec.Cmd
	proxyMu  sync.Mutex
	proxyLog strings.Builder

	mu        sync.Mutex
	queries   map[string]int
	hosts     []string
	accepted  atomic.Int64
	datagrams atomic.Int64
}

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

func newPodLab() (*podLab, error) {
	for _, tool := range []string{"ip", "nsenter", "setpriv", "busybox", "nft", "curl", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("needs %s (apt-get install -y iproute2 util-linux busybox-static nftables curl)", tool)
		}
	}
	l := &podLab{queries: map[string]int{}}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "vworld", "type", "veth", "peer", "name", "vpod"},
		{"addr", "add", worldAddr + "/24", "dev", "vworld"},
		{"addr", "add", otherAddr + "/32", "dev", "vworld"},
		{"link", "set", "vworld", "up"},
	} {
		if err := run("ip", args...); err != nil {
			return nil, err
		}
	}
	if err := l.startWorld(); err != nil {
		return nil, err
	}
	// The pod's namespace, held by a child of the test binary.
	l.holder = exec.Command("/proc/self/exe")
	l.holder.Env = append(os.Environ(), roleEnv+"=hold")
	l.holder.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	in, err := l.holder.StdinPipe()
	if err != nil {
		return nil, err
	}
	l.holdIn = in
	if err := l.holder.Start(); err != nil {
		return nil, err
	}
	l.netns = fmt.Sprintf("/proc/%d/ns/net", l.holder.Process.Pid)
	if err := run("ip", "link", "set", "vpod", "netns", fmt.Sprint(l.holder.Process.Pid)); err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", podAddr + "/24", "dev", "vpod"},
		{"link", "set", "vpod", "up"},
		{"route", "add", "default", "via", worldAddr},
	} {
		if err := run("nsenter", append([]string{"--net=" + l.netns, "ip"}, args...)...); err != nil {
			return nil, err
		}
	}
	// A copy of the test binary the proxy's user may run.
	l.dir, err = os.MkdirTemp("", "akegress-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(l.dir, 0o755); err != nil {
		return nil, err
	}
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		return nil, err
	}
	l.exe = filepath.Join(l.dir, "kube-egress.test")
	if err := os.WriteFile(l.exe, self, 0o755); err != nil {
		return nil, err
	}
	// The init container: root, in the pod's namespace.
	init := exec.Command("nsenter", "--net="+l.netns, l.exe)
	init.Env = append(os.Environ(), roleEnv+"=main", argsEnv+"="+strings.Join(kubeegress.DefaultRules().Args(), " "))
	if out, err := init.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("kube-egress init: %v: %s", err, out)
	}
	if err := l.startProxy(); err != nil {
		return nil, err
	}
	return l, nil
}

// startProxy runs "kube-egress serve" as the sidecar does and waits
// until it says it is ready.
func (l *podLab) startProxy() error {
	s := kubeegress.Settings{
		Network:   sandbox.Network{Mode: sandbox.NetworkFiltered, AllowDomains: []string{"allowed.test"}},
		Resolvers: []string{worldAddr + ":53"},
		TCPPort:   kubeegress.TCPPort, DNSPort: kubeegress.DNSPort,
	}
	b, _ := json.Marshal(s)
	uid := fmt.Sprint(kubeegress.UID)
	cmd := exec.Command("nsenter", "--net="+l.netns, "setpriv", "--reuid="+uid, "--regid="+uid, "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all", "--", l.exe)
	cmd.Env = append(os.Environ(), roleEnv+"=main", argsEnv+"=serve", kubeegress.EnvSettings+"="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	errp, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	l.proxy = cmd
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(errp)
		once := sync.Once{}
		for sc.Scan() {
			l.proxyMu.Lock()
			l.proxyLog.WriteString(sc.Text() + "\n")
			l.proxyMu.Unlock()
			if strings.Contains(sc.Text(), `"ready"`) {
				once.Do(func() { close(ready) })
			}
		}
	}()
	select {
	case <-ready:
		return nil
	case <-time.After(20 * time.Second):
		return fmt.Errorf("the proxy never said it was ready: %s", l.log())
	}
}

func (l *podLab) log() string {
	l.proxyMu.Lock()
	defer l.proxyMu.Unlock()
	return l.proxyLog.String()
}

func (l *podLab) close() {
	if l.proxy != nil && l.proxy.Process != nil {
		l.proxy.Process.Kill()
		l.proxy.Wait()
	}
	if l.holdIn != nil {
		l.holdIn.Close()
		l.holder.Wait()
	}
	if l.dir != "" {
		os.RemoveAll(l.dir)
	}
}

// startWorld serves DNS on worldAddr (allowed.test is worldAddr,
// denied.test otherAddr, other names NXDOMAIN), HTTP on port 80 of both
// addresses answering with the Host asked for, and two counters on
// otherAddr: TCP connections accepted on 8443 and UDP datagrams
// received on 9999.
func (l *podLab) startWorld() error {
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if len(r.Question) == 1 {
			q := r.Question[0]
			name := strings.ToLower(strings.TrimSuffix(q.Name, "."))
			l.mu.Lock()
			l.queries[name]++
			l.mu.Unlock()
			switch {
			case name != "allowed.test" && name != "denied.test":
				m.Rcode = dns.RcodeNameError
			case q.Qtype == dns.TypeA && name == "allowed.test":
				rr, _ := dns.NewRR(q.Name + " 60 IN A " + worldAddr)
				m.Answer = append(m.Answer, rr)
			case q.Qtype == dns.TypeA:
				rr, _ := dns.NewRR(q.Name + " 60 IN A " + otherAddr)
				m.Answer = append(m.Answer, rr)
			}
		}
		_ = w.WriteMsg(m)
	})
	for _, proto := range []string{"udp", "tcp"} {
		started := make(chan error, 1)
		srv := &dns.Server{Addr: worldAddr + ":53", Net: proto, Handler: h, NotifyStartedFunc: func() { started <- nil }}
		go func() { started <- srv.ListenAndServe() }()
		if err := <-started; err != nil {
			return fmt.Errorf("world DNS over %s: %w", proto, err)
		}
	}
	for _, a := range []string{worldAddr, otherAddr} {
		web, err := net.Listen("tcp", a+":80")
		if err != nil {
			return err
		}
		go http.Serve(web, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l.mu.Lock()
			l.hosts = append(l.hosts, r.Host)
			l.mu.Unlock()
			fmt.Fprintf(w, "world host=%s\n", r.Host)
		}))
	}
	counter, err := net.Listen("tcp", otherAddr+":8443")
	if err != nil {
		return err
	}
	go func() {
		for {
			c, err := counter.Accept()
			if err != nil {
				return
			}
			l.accepted.Add(1)
			c.Close()
		}
	}()
	pc, err := net.ListenPacket("udp", otherAddr+":9999")
	if err != nil {
		return err
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			l.datagrams.Add(1)
		}
	}()
	return nil
}

func (l *podLab) queriesFor(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queries[name]
}

func (l *podLab) hostsSeen() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.hosts...)
}

// in runs a command in the pod as user uid with every capability
// dropped: the sandbox's container (uid 0) or the proxy's user.
func (l *podLab) in(t *testing.T, uid int, args ...string) (string, error) {
	t.Helper()
	u := fmt.Sprint(uid)
	cmd := exec.Command("nsenter", append([]string{"--net=" + l.netns, "setpriv", "--reuid=" + u, "--regid=" + u, "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all", "--"}, args...)...)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%v hung", args)
	}
	return string(out), err
}

func needLab(t *testing.T) *podLab {
	t.Helper()
	if setupErr != nil {
		testenv.Missing(t, "the pod's network: %v", setupErr)
	}
	return lab
}

func TestEgressProxy(t *testing.T) {
	l := needLab(t)
	sandboxRoot := 0

	t.Run("allowed name", func(t *testing.T) {
		out, err := l.in(t, sandboxRoot, "curl", "-sS", "--max-time", "5", "http://allowed.test/")
		if err != nil || !strings.Contains(out, "world host=allowed.test") {
			t.Fatalf("wget http://allowed.test/: %v: %q\nproxy: %s", err, out, l.log())
		}
		if l.queriesFor("allowed.test") == 0 {
			t.Fatal("the world's resolver was never asked for allowed.test: the answer did not come through the proxy")
		}
	})
	t.Run("name not on the list", func(t *testing.T) {
		out, err := l.in(t, sandboxRoot, "curl", "-sS", "--max-time", "5", "http://denied.test/")
		if err == nil {
			t.Fatalf("wget http://denied.test/ succeeded: %q", out)
		}
		if n := l.queriesFor("denied.test"); n != 0 {
			t.Fatalf("denied.test was asked of the world %d times: the proxy must answer it without asking", n)
		}
	})
	t.Run("loopback resolver", func(t *testing.T) {
		// A resolver on a loopback address (resolv.conf naming none) is
		// the proxy's too.
		out, _ := l.in(t, sandboxRoot, "busybox", "nslookup", "allowed.test", "127.0.0.1")
		if !strings.Contains(out, worldAddr) {
			t.Fatalf("nslookup allowed.test 127.0.0.1: %q", out)
		}
		out, _ = l.in(t, sandboxRoot, "busybox", "nslookup", "denied.test", "127.0.0.53")
		if !strings.Contains(out, "NXDOMAIN") {
			t.Fatalf("nslookup denied.test 127.0.0.53: %q", out)
		}
	})
	t.Run("own resolver", func(t *testing.T) {
		// DNS sent straight to the world's server is redirected too.
		out, _ := l.in(t, sandboxRoot, "busybox", "nslookup", "denied.test", worldAddr)
		if !strings.Contains(out, "NXDOMAIN") {
			t.Fatalf("nslookup denied.test %s answered an address: %q", worldAddr, out)
		}
		if n := l.queriesFor("denied.test"); n != 0 {
			t.Fatalf("a query sent to the world's server reached it (%d): %q", n, out)
		}
	})
	t.Run("address literal", func(t *testing.T) {
		before := len(l.hostsSeen())
		out, err := l.in(t, sandboxRoot, "curl", "-sS", "--max-time", "5", "http://"+otherAddr+"/")
		if err == nil || len(l.hostsSeen()) != before {
			t.Fatalf("a request to an address no allowed name resolved to went through: %v %q", err, out)
		}
		out, _ = l.in(t, sandboxRoot, "busybox", "nc", "-w", "2", otherAddr, "8443")
		if n := l.accepted.Load(); n != 0 {
			t.Fatalf("a TCP connection to %s:8443 reached the world (%d): %q", otherAddr, n, out)
		}
	})
	t.Run("host header of another name", func(t *testing.T) {
		out, err := l.in(t, sandboxRoot, "curl", "-sS", "--max-time", "5", "-H", "Host: denied.test", "http://allowed.test/")
		if err == nil || strings.Contains(out, "denied.test") {
			t.Fatalf("a request for Host denied.test on allowed.test's address went through: %v %q", err, out)
		}
		for _, h := range l.hostsSeen() {
			if h == "denied.test" {
				t.Fatal("the world served Host denied.test")
			}
		}
	})
	t.Run("udp", func(t *testing.T) {
		out, err := l.in(t, sandboxRoot, "bash", "-c", "echo x > /dev/udp/"+otherAddr+"/9999")
		if err == nil {
			t.Errorf("sending a UDP datagram to %s:9999 did not fail: %q", otherAddr, out)
		}
		time.Sleep(200 * time.Millisecond)
		if n := l.datagrams.Load(); n != 0 {
			t.Fatalf("%d UDP datagrams reached the world", n)
		}
	})
	t.Run("attacks", func(t *testing.T) {
		if out, err := l.in(t, sandboxRoot, "nft", "flush", "ruleset"); err == nil {
			t.Fatalf("the sandbox flushed the pod's rules: %q", out)
		}
		if out, err := l.in(t, sandboxRoot, "nft", "delete", "table", "inet", TableName); err == nil {
			t.Fatalf("the sandbox deleted the rules' table: %q", out)
		}
		if out, err := l.in(t, sandboxRoot, "busybox", "ip", "route", "add", "198.18.9.0/24", "dev", "vpod"); err == nil {
			t.Fatalf("the sandbox changed the pod's routes: %q", out)
		}
		// Becoming the proxy's user needs CAP_SETUID, which the sandbox
		// has not.
		uid := fmt.Sprint(kubeegress.UID)
		if out, err := l.in(t, sandboxRoot, "setpriv", "--reuid="+uid, "--", "busybox", "true"); err == nil {
			t.Fatalf("the sandbox became the proxy's user: %q", out)
		}
		// The rules still hold.
		if out, err := l.in(t, sandboxRoot, "curl", "-sS", "--max-time", "5", "http://"+otherAddr+"/"); err == nil {
			t.Fatalf("after the attacks, an address literal went through: %q", out)
		}
	})
	t.Run("the proxy's user passes", func(t *testing.T) {
		// The one exception is exact: the proxy's user reaches the world
		// directly (so the sandbox must never be it).
		out, err := l.in(t, kubeegress.UID, "curl", "-sS", "--max-time", "5", "http://"+otherAddr+"/")
		if err != nil || !strings.Contains(out, "world host="+otherAddr) {
			t.Fatalf("the proxy's user could not reach the world: %v %q", err, out)
		}
		if out, err := l.in(t, kubeegress.UID, "bash", "-c", "echo x > /dev/udp/"+otherAddr+"/9999"); err != nil {
			t.Fatalf("the proxy's user could not send UDP: %v %q", err, out)
		}
		deadline := time.Now().Add(5 * time.Second)
		for l.datagrams.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if l.datagrams.Load() == 0 {
			t.Fatal("the proxy's user's datagram never arrived: the UDP check above proves nothing")
		}
	})
	t.Run("denials reported", func(t *testing.T) {
		log := l.log()
		for _, want := range []string{"denied.test", otherAddr} {
			if !strings.Contains(log, want) {
				t.Errorf("the proxy's log names no refusal of %s:\n%s", want, log)
			}
		}
	})
	t.Run("proxy gone: closed", func(t *testing.T) {
		l.proxy.Process.Kill()
		l.proxy.Wait()
		out, err := l.in(t, sandboxRoot, "curl", "-sS", "--max-time", "5", "http://allowed.test/")
		if err == nil {
			t.Fatalf("with the proxy gone, a request went through: %q", out)
		}
		if err := l.startProxy(); err != nil {
			t.Fatal(err)
		}
		out, err = l.in(t, sandboxRoot, "curl", "-sS", "--max-time", "5", "http://allowed.test/")
		if err != nil || !strings.Contains(out, "world host=allowed.test") {
			t.Fatalf("a restarted proxy does not serve: %v %q", err, out)
		}
	})
}

func TestInitTwice(t *testing.T) {
	l := needLab(t)
	// An init container run again (the pod's sandbox restarted) replaces
	// the table rather than adding a second one.
	for i := 0; i < 2; i++ {
		init := exec.Command("nsenter", "--net="+l.netns, l.exe)
		init.Env = append(os.Environ(), roleEnv+"=main", argsEnv+"="+strings.Join(kubeegress.DefaultRules().Args(), " "))
		if out, err := init.CombinedOutput(); err != nil {
			t.Fatalf("kube-egress init: %v: %s", err, out)
		}
	}
	out, err := exec.Command("nsenter", "--net="+l.netns, "nft", "list", "tables").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list tables: %v: %s", err, out)
	}
	if n := strings.Count(string(out), TableName); n != 1 {
		t.Fatalf("%d tables named %s after two inits:\n%s", n, TableName, out)
	}
}

func TestMainArgs(t *testing.T) {
	var out, errb strings.Builder
	if c := Main(nil, &out, &errb); c != 2 || !strings.Contains(errb.String(), "kube-egress init") {
		t.Fatalf("no arguments: exit %d, %q", c, errb.String())
	}
	errb.Reset()
	if c := Main([]string{"bogus"}, &out, &errb); c != 2 || !strings.Contains(errb.String(), `unknown command "bogus"`) {
		t.Fatalf("unknown command: exit %d, %q", c, errb.String())
	}
	errb.Reset()
	if c := Main([]string{"init", "--tcp-port", "0"}, &out, &errb); c != 2 {
		t.Fatalf("port 0: exit %d, %q", c, errb.String())
	}
	t.Setenv(kubeegress.EnvSettings, `{"network":{"mode":"none"},"tcp_port":1,"dns_port":2}`)
	errb.Reset()
	if c := Main([]string{"serve"}, &out, &errb); c != 1 || !strings.Contains(errb.String(), "not served by a proxy") {
		t.Fatalf("mode none: exit %d, %q", c, errb.String())
	}
	t.Setenv(kubeegress.EnvSettings, `{`)
	errb.Reset()
	if c := Main([]string{"serve"}, &out, &errb); c != 2 {
		t.Fatalf("bad JSON: exit %d, %q", c, errb.String())
	}
}

package netproc_test

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/netproc"
	"github.com/agentkernel/agentkernel/internal/netproc/helper"
	"github.com/agentkernel/agentkernel/internal/netstack/netnstest"
	"github.com/agentkernel/agentkernel/internal/netstack/tundev"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// The test binary is the helper too, as agentkernel-full is: started
// as netproc.Argv0 it runs the real helper.Main.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == netproc.Argv0 {
		if len(os.Args) > 1 && os.Args[1] == "hostile" {
			os.Exit(hostileHelper())
		}
		if len(os.Args) > 1 && os.Args[1] == "hostile-dial" {
			os.Exit(hostileDialer())
		}
		if len(os.Args) > 1 && os.Args[1] == "hostile-flood" {
			os.Exit(dialFlooder())
		}
		os.Exit(helper.Main(native.ConfineProcess))
	}
	os.Exit(m.Run())
}

// sandboxNet is a network namespace with a configured TUN device, as the
// network stage leaves it.
func sandboxNet(t *testing.T) (*netnstest.Netns, *os.File) { return netnstest.NewTUN(t) }

func start(t *testing.T, tun *os.File, n sandbox.Network, onDeny func(netproc.Denial)) *netproc.Proc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := netproc.Start(self, tun, netproc.Config{SandboxID: "test", Network: n}, onDeny)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Close() })
	if err := p.Ready(); err != nil {
		t.Fatalf("ready: %v", err)
	}
	return p
}

// query asks the sandbox's resolver for name from inside the namespace.
func query(t *testing.T, ns *netnstest.Netns, name string) int {
	t.Helper()
	var rcode int = -1
	ns.Do(func() {
		c := &dns.Client{Timeout: 3 * time.Second}
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), dns.TypeA)
		r, _, err := c.Exchange(m, net.JoinHostPort(tundev.DefaultLayout().DNS4.String(), "53"))
		if err != nil {
			t.Errorf("query %s: %v", name, err)
			return
		}
		rcode = r.Rcode
	})
	return rcode
}

// TestHelperRefusesAndReports: a refused name reaches the owner at once
// (onDeny) and in the final report, with the flag that would allow it.
func TestHelperRefusesAndReports(t *testing.T) {
	ns, tun := sandboxNet(t)
	denied := make(chan netproc.Denial, 8)
	p := start(t, tun, sandbox.Network{Mode: sandbox.NetworkFiltered, AllowDomains: []string{"allowed.test"}},
		func(d netproc.Denial) { denied <- d })
	if rc := query(t, ns, "blocked.example"); rc != dns.RcodeNameError {
		t.Fatalf("blocked.example: rcode %d, want NXDOMAIN", rc)
	}
	select {
	case d := <-denied:
		if d.Kind != "dns" || d.Name != "blocked.example" || !strings.Contains(d.Hint, "--allow-domain blocked.example") {
			t.Errorf("denial %+v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no denial reached the owner")
	}
	rep, err := p.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Denials) != 1 || rep.Denials[0].Name != "blocked.example" || !strings.Contains(rep.Summary, "blocked.example") {
		t.Errorf("report %+v", rep)
	}
	if rep.Counters["dns_queries"] == 0 {
		t.Errorf("counters %v", rep.Counters)
	}
}

// TestHelperHoldsNoCapability: every thread of a serving helper has no
// capability in any set, no_new_privs, a seccomp filter, and (started by
// root) nobody's ids.
func TestHelperHoldsNoCapability(t *testing.T) {
	_, tun := sandboxNet(t)
	p := start(t, tun, sandbox.Network{Mode: sandbox.NetworkFull}, nil)
	tasks, err := os.ReadDir("/proc/" + itoa(p.Pid()) + "/task")
	if err != nil || len(tasks) < 2 {
		t.Fatalf("tasks of the helper: %v (%d)", err, len(tasks))
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + itoa(p.Pid()) + "/task/" + task.Name() + "/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimSpace(v)
			switch k {
			case "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb":
				if strings.Trim(v, "0") != "" {
					t.Errorf("thread %s: %s %s", task.Name(), k, v)
				}
			case "NoNewPrivs":
				if v != "1" {
					t.Errorf("thread %s: NoNewPrivs %s", task.Name(), v)
				}
			case "Seccomp":
				// Filtered (2): no namespaces, mounts, bpf, keyrings or
				// ptrace for a process that parses the sandbox's packets.
				if v != "2" {
					t.Errorf("thread %s: Seccomp %s, want 2 (filtered)", task.Name(), v)
				}
			case "Uid", "Gid":
				// Started by root, it runs as nobody: root without
				// capabilities would still own the host's files.
				if f := strings.Fields(v); os.Geteuid() == 0 && (len(f) != 4 || f[0] != "65534" || f[1] != "65534" || f[2] != "65534" || f[3] != "65534") {
					t.Errorf("thread %s: %s %s, want nobody's", task.Name(), k, v)
				}
			case "Groups":
				if os.Geteuid() == 0 && v != "" {
					t.Errorf("thread %s: supplementary groups %q", task.Name(), v)
				}
			}
		}
	}
}

// TestHelperEndsWithItsOwner: a helper whose owner's socket closes
// without a word (the owner was killed) ends.
func TestHelperEndsWithItsOwner(t *testing.T) {
	_, tun := sandboxNet(t)
	p := start(t, tun, sandbox.Network{Mode: sandbox.NetworkFull}, nil)
	pid := p.Pid()
	p.Abandon()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(b), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGQUIT)
			time.Sleep(500 * time.Millisecond)
			t.Fatal("the helper outlived its owner's socket")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHelperRefusesBadPublish: a published port that cannot be bound is
// an error the owner gets from Ready.
func TestHelperRefusesBadPublish(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	_, tun := sandboxNet(t)
	self, _ := os.Executable()
	p, err := netproc.Start(self, tun, netproc.Config{Network: sandbox.Network{Mode: sandbox.NetworkFull,
		Ports: []sandbox.PortMapping{{HostPort: port, SandboxPort: 80}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Ready(); err == nil || !strings.Contains(err.Error(), "publishing") {
		t.Fatalf("Ready = %v, want a publishing error", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// hostileHelper is a helper the sandbox took over: it floods its owner
// with refusals, long texts and an oversized report.
func hostileHelper() int {
	sock := os.NewFile(netproc.SocketFD, "owner")
	buf := make([]byte, netproc.MaxMessage)
	if _, err := sock.Read(buf); err != nil {
		return 1
	}
	send := func(m netproc.Message) {
		b, _ := json.Marshal(m)
		sock.Write(b)
	}
	send(netproc.Message{Ready: true})
	long := strings.Repeat("x", 4<<10)
	// More refusals than the owner keeps (1024), and no more: on a
	// loaded machine a larger flood outlasts the owner's wait for the
	// report at Close, which is not what this test is about.
	for i := 0; i < 1300; i++ {
		send(netproc.Message{Deny: &netproc.Denial{Kind: "dns", Name: long + strconv.Itoa(i), Reason: long}})
	}
	if _, err := sock.Read(buf); err != nil { // stop
		return 1
	}
	rep := netproc.Report{Summary: long}
	for i := 0; i < 5000; i++ {
		rep.Denials = append(rep.Denials, netproc.Denial{Kind: "tcp", Addr: strconv.Itoa(i), Reason: "r"})
	}
	send(netproc.Message{Report: &rep})
	return 0
}

// TestHostileHelperIsBounded: what a helper says reaches its owner
// bounded (a sandbox that took its helper over cannot fill the audit log
// through it).
func TestHostileHelperIsBounded(t *testing.T) {
	_, tun := sandboxNet(t)
	self, _ := os.Executable()
	var denials, bytes int
	p, err := netproc.Start(self, tun, netproc.Config{SandboxID: "hostile", Network: sandbox.Network{Mode: sandbox.NetworkFull}},
		func(d netproc.Denial) { denials++; bytes += len(d.Name) + len(d.Reason) })
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Ready(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // let the flood come
	rep, err := p.Close()
	if err != nil {
		t.Fatal(err)
	}
	if denials == 0 || denials > 1024 || bytes > 1024*(255+1024+8) {
		t.Errorf("%d refusals (%d bytes of text) reached the owner", denials, bytes)
	}
	if len(rep.Denials) > 1024 || len(rep.Summary) > 1100 {
		t.Errorf("report: %d refusals, a %d-byte summary", len(rep.Denials), len(rep.Summary))
	}
}

// proxySandbox is a network namespace standing for a sandbox in proxy
// mode: the proxy's listening socket inside it (what the network stage
// hands the helper) and a Dial that connects from inside it, as the
// owner's does (the native backend's own is tested end to end).
func proxySandbox(t *testing.T) (*netnstest.Netns, *os.File, func(uint16) (*os.File, error)) {
	ns := netnstest.New(t)
	var proxy *os.File
	var err error
	ns.Do(func() {
		var ln net.Listener
		if ln, err = net.Listen("tcp", "127.0.0.1:3128"); err == nil {
			proxy, err = ln.(*net.TCPListener).File()
			ln.Close()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	dial := func(port uint16) (f *os.File, err error) {
		ns.Do(func() {
			var c net.Conn
			if c, err = net.Dial("tcp", "127.0.0.1:"+itoa(int(port))); err == nil {
				f, err = c.(*net.TCPConn).File()
				c.Close()
			}
		})
		return f, err
	}
	return ns, proxy, dial
}

// freePort is a host port nobody listens on.
func freePort(t *testing.T) uint16 {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// TestProxyModePublish: in proxy mode the helper publishes a port on the
// host and forwards each connection to a connection the owner made
// inside the sandbox, both ways; the report counts them.
func TestProxyModePublish(t *testing.T) {
	ns, proxy, dial := proxySandbox(t)
	var srv net.Listener
	var err error
	ns.Do(func() { srv, err = net.Listen("tcp", "127.0.0.1:8000") })
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	go func() {
		for {
			c, err := srv.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 5)
				if _, err := c.Read(b); err == nil {
					c.Write(append([]byte("echo "), b...))
				}
			}()
		}
	}()
	host := freePort(t)
	self, _ := os.Executable()
	p, err := netproc.Start(self, proxy, netproc.Config{SandboxID: "proxy", Mode: netproc.ModeProxy, Dial: dial,
		Network: sandbox.Network{Mode: sandbox.NetworkFull, Ports: []sandbox.PortMapping{{HostPort: host, SandboxPort: 8000}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Ready(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", "127.0.0.1:"+itoa(int(host)))
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte("hello"))
		b := make([]byte, 32)
		n, _ := io.ReadFull(c, b[:10])
		c.Close()
		if string(b[:n]) != "echo hello" {
			t.Fatalf("connection %d through the published port: %q", i, b[:n])
		}
	}
	rep, err := p.Close()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counters["published"] != 3 {
		t.Errorf("published = %d, want 3", rep.Counters["published"])
	}
}

// hostileDialer is a helper the sandbox took over that asks its owner
// for connections to a port that is not published and to one that is,
// and tells the owner what it got as refusals' names.
func hostileDialer() int {
	sock := os.NewFile(netproc.SocketFD, "owner")
	buf := make([]byte, netproc.MaxMessage)
	n, err := sock.Read(buf)
	if err != nil {
		return 1
	}
	var m netproc.Message
	if json.Unmarshal(buf[:n], &m) != nil || m.Config == nil {
		return 1
	}
	send := func(m netproc.Message) {
		b, _ := json.Marshal(m)
		sock.Write(b)
	}
	send(netproc.Message{Ready: true})
	send(netproc.Message{Dial: &netproc.DialRequest{Seq: 1, Port: 8001}})
	send(netproc.Message{Dial: &netproc.DialRequest{Seq: 2, Port: m.Config.Network.Ports[0].SandboxPort}})
	oob := make([]byte, syscall.CmsgSpace(4))
	for got := 0; got < 2; {
		n, oobn, _, _, err := syscall.Recvmsg(netproc.SocketFD, buf, oob, 0)
		if err != nil {
			return 1
		}
		var a netproc.Message
		if json.Unmarshal(buf[:n], &a) != nil || a.Dialed == nil {
			continue
		}
		got++
		send(netproc.Message{Deny: &netproc.Denial{Kind: "tcp", Name: itoa(int(a.Dialed.Seq)) + ":" + a.Dialed.Error + ":" + itoa(oobn)}})
	}
	if _, err := sock.Read(buf); err != nil { // stop
		return 1
	}
	send(netproc.Message{Report: &netproc.Report{}})
	return 0
}

// TestHostileHelperDialsOnlyPublished: a helper the sandbox took over
// gets connections into the sandbox only to its published ports: the
// owner dials nothing else.
func TestHostileHelperDialsOnlyPublished(t *testing.T) {
	ns, proxy, dial := proxySandbox(t)
	// Both ports listen in the sandbox: only the published one may be
	// reached.
	for _, port := range []string{"8000", "8001"} {
		var ln net.Listener
		var err error
		ns.Do(func() { ln, err = net.Listen("tcp", "127.0.0.1:"+port) })
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
	}
	var mu sync.Mutex
	var dialled []uint16
	var said []string
	self, _ := os.Executable()
	cfg := netproc.Config{SandboxID: "hostile-dial", Mode: netproc.ModeProxy,
		Network: sandbox.Network{Mode: sandbox.NetworkFull, Ports: []sandbox.PortMapping{{HostPort: freePort(t), SandboxPort: 8000}}},
		Dial: func(port uint16) (*os.File, error) {
			mu.Lock()
			dialled = append(dialled, port)
			mu.Unlock()
			return dial(port)
		}}
	p, err := netproc.Start(self, proxy, cfg, func(d netproc.Denial) {
		mu.Lock()
		said = append(said, d.Name)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Ready(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(said)
		mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := p.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, port := range dialled {
		if port != 8000 {
			t.Errorf("the owner dialled port %d in the sandbox for the helper", port)
		}
	}
	sort.Strings(said)
	// 8001 is refused without a connection; 8000 comes with one.
	if len(said) != 2 || said[0] != "1:port 8001 is not published:0" || said[1] != "2::"+itoa(syscall.CmsgSpace(4)) {
		t.Errorf("the helper got %q", said)
	}
}

// dialFlooder is a helper the sandbox took over that asks for
// connections without ever reading the answers.
func dialFlooder() int {
	sock := os.NewFile(netproc.SocketFD, "owner")
	buf := make([]byte, netproc.MaxMessage)
	if _, err := sock.Read(buf); err != nil {
		return 1
	}
	send := func(m netproc.Message) {
		b, _ := json.Marshal(m)
		sock.Write(b)
	}
	send(netproc.Message{Ready: true})
	for i := 0; i < 100000; i++ {
		send(netproc.Message{Dial: &netproc.DialRequest{Seq: uint64(i), Port: uint16(i)}})
	}
	time.Sleep(time.Minute)
	return 0
}

// TestDialFloodDoesNotHoldOwner: a helper that asks for connections and
// never reads the answers cannot keep its owner from stopping it.
func TestDialFloodDoesNotHoldOwner(t *testing.T) {
	_, proxy, dial := proxySandbox(t)
	self, _ := os.Executable()
	p, err := netproc.Start(self, proxy, netproc.Config{SandboxID: "hostile-flood", Mode: netproc.ModeProxy, Dial: dial,
		Network: sandbox.Network{Mode: sandbox.NetworkFull, Ports: []sandbox.PortMapping{{HostPort: freePort(t), SandboxPort: 8000}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Ready(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // let the flood fill the owner's side
	done := make(chan struct{})
	go func() { _, _ = p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("Close is held up by a helper that does not read")
	}
}

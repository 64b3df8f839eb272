package netlab

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// New builds a lab for t and tears it down when t ends. It needs root
// and iproute2's ip: without them it ends t through testenv.Missing.
func New(t testing.TB, opts ...Option) *Lab {
	t.Helper()
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		testenv.Missing(t, "netlab needs ip (Debian package iproute2)")
	}
	cfg := config{ttl: 30}
	for _, o := range opts {
		o(&cfg)
	}
	sweepStale()
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
	l := &Lab{
		t:        t,
		inetNS:   "netlab-" + id + "-inet",
		clientNS: "netlab-" + id + "-client",
		ttl:      cfg.ttl,
		names:    DefaultNames(),
	}
	g := &group{}
	t.Cleanup(func() { l.close(g) })
	if err := l.setup(g); err != nil {
		t.Fatalf("netlab: %v", err)
	}
	return l
}

// sweepStale removes what labs of processes that are gone left behind
// (a test binary killed at its timeout runs no cleanup): namespaces
// named netlab-PID-..., and their /etc/netns directories.
func sweepStale() {
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "netlab-")
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		_ = ipCmd("", "netns", "del", e.Name())
		_ = os.RemoveAll(filepath.Join("/etc/netns", e.Name()))
	}
}

func (l *Lab) setup(g *group) error {
	dir, err := os.MkdirTemp("", "netlab-")
	if err != nil {
		return err
	}
	l.dir = dir
	// Readable by every user: rootless code under test reads the CA.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if l.ca, err = newAuthority(dir); err != nil {
		return fmt.Errorf("CA: %w", err)
	}
	if l.fix, err = newFixtures(dir); err != nil {
		return err
	}
	if err := l.makeNamespaces(); err != nil {
		return err
	}
	if err := l.startServers(g); err != nil {
		return err
	}
	rc := filepath.Join("/etc/netns", l.clientNS)
	conf := fmt.Sprintf("# netlab %s\nnameserver %s\nnameserver %s\noptions timeout:1 attempts:2\n", l.clientNS, DNS4, DNS6)
	// Another lab's cleanup may remove an empty /etc/netns between the
	// two: try again once.
	for try := 0; ; try++ {
		err := os.MkdirAll(rc, 0o755)
		if err == nil {
			err = os.WriteFile(filepath.Join(rc, "resolv.conf"), []byte(conf), 0o644)
		}
		if err == nil || try > 0 || !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
}

func ipCmd(stdin string, args ...string) error {
	cmd := exec.Command("ip", args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// makeNamespaces makes both namespaces, the veth pair between them
// (made inside them: the caller's namespace never holds it), addresses
// and routes.
func (l *Lab) makeNamespaces() error {
	for _, ns := range []string{l.inetNS, l.clientNS} {
		if err := ipCmd("", "netns", "add", ns); err != nil {
			return err
		}
		// No duplicate address detection: addresses are usable at once.
		if err := inNS("/run/netns/"+ns, func() error {
			for _, f := range []string{"all", "default"} {
				p := "/proc/sys/net/ipv6/conf/" + f + "/accept_dad"
				if err := os.WriteFile(p, []byte("0"), 0o644); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	if err := ipCmd("", "-n", l.inetNS, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", l.clientNS); err != nil {
		return err
	}
	var inet strings.Builder
	inet.WriteString("link set lo up\n")
	fmt.Fprintf(&inet, "addr add %s/15 dev eth0\n", Gateway4)
	fmt.Fprintf(&inet, "addr add %s/48 dev eth0 nodad\n", Gateway6)
	for _, a := range inetAddrs() {
		if a.Is4() {
			fmt.Fprintf(&inet, "addr add %s/32 dev eth0\n", a)
		} else {
			fmt.Fprintf(&inet, "addr add %s/128 dev eth0 nodad\n", a)
		}
	}
	inet.WriteString("link set eth0 up\n")
	if err := ipCmd(inet.String(), "-n", l.inetNS, "-batch", "-"); err != nil {
		return err
	}
	client := fmt.Sprintf("link set lo up\naddr add %s/15 dev eth0\naddr add %s/48 dev eth0 nodad\nlink set eth0 up\n"+
		"route add default via %s\nroute add ::/0 via %s\n", Client4, Client6, Gateway4, Gateway6)
	return ipCmd(client, "-n", l.clientNS, "-batch", "-")
}

// inNS runs fn on an OS thread moved into the network namespace at
// path. The thread is never unlocked: it ends with fn's goroutine, so
// no other goroutine ever runs in that namespace. Sockets fn makes stay
// in the namespace after it returns.
func inNS(path string, fn func() error) error { return InNS(path, fn) }

// InNS runs fn on an OS thread of its own moved into the network
// namespace at path, never the process's main thread (which the runtime
// never ends: it would stay in the namespace, and /proc/self/ns/net
// with it). The thread ends with fn.
func InNS(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread: held here while another goroutine, which
			// then cannot be given it, does the work.
			errc <- InNS(path, fn)
			runtime.UnlockOSThread()
			return
		}
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open %s: %w", path, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		_ = unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("setns %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// InClient runs fn on an OS thread in the client namespace: sockets fn
// makes belong to it (goroutines fn starts do not run there).
func (l *Lab) InClient(fn func() error) error { return inNS(l.ClientNSPath(), fn) }

// InInet runs fn on an OS thread in the internet's namespace, as
// InClient does in the client's (to add a server of a test's own).
func (l *Lab) InInet(fn func() error) error { return inNS("/run/netns/"+l.inetNS, fn) }

func (l *Lab) startServers(g *group) error {
	err := l.InInet(func() error {
		for _, a := range []netip.Addr{Addr(DNS4), Addr(DNS6)} {
			if err := l.startDNS(g, a); err != nil {
				return err
			}
		}
		h := l.handler()
		for _, s := range []struct {
			port    int
			service string
		}{{PortHTTP, "http"}, {PortHTTPS, "https"}, {PortRecorder, "recorder"}, {PortSink, "sink"}, {PortSource, "source"}} {
			ln, err := net.Listen("tcp", ":"+strconv.Itoa(s.port))
			if err != nil {
				return fmt.Errorf("inet %s: %w", s.service, err)
			}
			switch s.service {
			case "http":
				l.serveHTTP(g, ln, s.service, h, false)
			case "https":
				l.serveHTTP(g, ln, s.service, h, true)
			case "recorder":
				l.serveStream(g, ln, s.service, l.recorder)
			case "sink":
				l.serveStream(g, ln, s.service, l.sink)
			case "source":
				l.serveStream(g, ln, s.service, l.source)
			}
		}
		for _, a := range append([]netip.Addr{Addr(Gateway4), Addr(Gateway6)}, inetAddrs()...) {
			pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, PortEcho)))
			if err != nil {
				return fmt.Errorf("inet echo on %s: %w", a, err)
			}
			l.serveEcho(g, pc)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return l.InClient(func() error {
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(PortHTTP))
		if err != nil {
			return fmt.Errorf("client host server: %w", err)
		}
		l.serveHTTP(g, ln, "host-http", l.hostHandler(), false)
		return nil
	})
}

func (l *Lab) startDNS(g *group, a netip.Addr) error {
	ap := netip.AddrPortFrom(a, 53)
	pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
	if err != nil {
		return fmt.Errorf("dns on %s: %w", ap, err)
	}
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(ap))
	if err != nil {
		_ = pc.Close()
		return fmt.Errorf("dns on %s: %w", ap, err)
	}
	for _, srv := range []*dns.Server{
		{PacketConn: pc, Handler: dns.HandlerFunc(l.serveDNS)},
		{Listener: logListener{Listener: ln, lab: l, service: "dns"}, Handler: dns.HandlerFunc(l.serveDNS)},
	} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		done := make(chan struct{})
		g.goServe(func() {
			defer close(done)
			_ = srv.ActivateAndServe()
		}, func() {
			_ = srv.Shutdown()
		})
		select {
		case <-started:
		case <-done:
			return fmt.Errorf("dns on %s did not start", ap)
		}
	}
	return nil
}

// close stops the servers and removes both namespaces (and the veth pair
// with them), the client's resolv.conf and the lab's files.
func (l *Lab) close(g *group) {
	g.stop()
	var errs []error
	for _, ns := range []string{l.clientNS, l.inetNS} {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			if err := ipCmd("", "netns", "del", ns); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := os.RemoveAll(filepath.Join("/etc/netns", l.clientNS)); err != nil {
		errs = append(errs, err)
	}
	_ = os.Remove("/etc/netns") // only when empty: it may be others'
	if l.dir != "" {
		if err := os.RemoveAll(l.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		l.t.Errorf("netlab cleanup: %v", err)
	}
}

// environ is the environment of Command: the caller's without proxy
// settings, with the lab's CA.
func (l *Lab) environ() []string {
	drop := map[string]bool{}
	for _, k := range []string{"http_proxy", "https_proxy", "all_proxy", "no_proxy", "ftp_proxy"} {
		drop[k] = true
	}
	for _, kv := range l.Env() {
		k, _, _ := strings.Cut(kv, "=")
		drop[strings.ToLower(k)] = true
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[strings.ToLower(k)] {
			env = append(env, kv)
		}
	}
	return append(env, l.Env()...)
}

// Command is `ip netns exec CLIENT name args...`: name runs in the
// client namespace, with the lab's resolv.conf, the lab's CA (Env) and
// without the caller's proxy variables.
func (l *Lab) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", l.clientNS, name}, args...)...)
	cmd.Env = l.environ()
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Resolver asks the lab's DNS server from the client namespace.
func (l *Lab) Resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return l.dialClient(ctx, network, net.JoinHostPort(DNS4, "53"))
	}}
}

func (l *Lab) dialClient(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := l.InClient(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// DialContext dials address from the client namespace, resolving names
// with the lab's DNS server.
func (l *Lab) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return l.dialClient(ctx, network, net.JoinHostPort(ip.String(), port))
	}
	family := "ip"
	if strings.HasSuffix(network, "4") {
		family = "ip4"
	} else if strings.HasSuffix(network, "6") {
		family = "ip6"
	}
	ips, err := l.Resolver().LookupNetIP(ctx, family, host)
	if err != nil {
		return nil, err
	}
	var first error
	for _, ip := range ips {
		c, err := l.dialClient(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// HTTPClient is an HTTP client whose connections start in the client
// namespace, trusting only the lab's CA.
func (l *Lab) HTTPClient() *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext:       l.DialContext,
			TLSClientConfig:   &tls.Config{RootCAs: l.CertPool()},
			ForceAttemptHTTP2: true,
		},
	}
}

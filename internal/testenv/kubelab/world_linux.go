//go:build linux

package kubelab

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// The ports a World serves on its address.
const (
	WorldDNSPort  = 53   // DNS, UDP and TCP
	WorldHTTPPort = 80   // HTTP: every request answered "world <Host>\n"
	WorldTCPPort  = 8443 // TCP: connections accepted, counted and closed
	WorldUDPPort  = 9999 // UDP: datagrams counted
)

// World stands in for the internet beside a node's pods: a network
// namespace of its own, joined to the node's bridge by a veth, holding
// WorldGateway (the next hop of the pods' only route out, to WorldNet)
// and one address of WorldNet, IP. On IP it serves, from goroutines of
// the test process, DNS, HTTP, a TCP port and a UDP port (the World*Port
// constants), and counts what reaches each, so that a test can prove
// that something did, or did not, get out of a pod.
//
// The DNS server is authoritative for the names StartWorld was given:
// an A query for one is answered with IP, a query of another type for
// one gets no answer and no error, and a query for any other name gets
// NXDOMAIN. A name "*.example.test" stands for every name under
// example.test (not example.test itself). Names are compared without
// case and without the trailing dot.
//
// A packet for any address of WorldNet other than IP (the node's own
// address included) reaches the world's namespace and goes no further:
// it forwards nothing.
type World struct {
	node  *Node
	ip    net.IP
	link  string // the host's end of the veth, on the node's bridge
	exact map[string]bool
	under []string // ".example.test" for "*.example.test"

	ns  chan func() // run on the namespace's thread
	tid int
	nsd chan struct{}

	dnsUDP, dnsTCP *dns.Server
	http           *http.Server
	tcp            net.Listener
	udp            net.PacketConn
	wg             sync.WaitGroup

	mu        sync.Mutex
	queries   map[string]int
	requests  []string
	accepted  int
	datagrams int
	closed    bool
}

// worldLink is the name of the host's end of the node's world veth.
func (n *Node) worldLink() string { return "aklw" + strings.TrimPrefix(n.bridge, "akl") }

// worldName normalizes a DNS name: lower case, no trailing dot.
func worldName(s string) string { return strings.TrimSuffix(strings.ToLower(s), ".") }

// StartWorld starts a world on the node's bridge (one at a time per
// node) that answers DNS for names; Close, or the node's Close, stops it.
// Pods see no change until it starts: without a world nothing answers
// at WorldGateway.
func (n *Node) StartWorld(ctx context.Context, names []string) (w *World, err error) {
	w = &World{node: n, link: n.worldLink(), exact: map[string]bool{}, queries: map[string]int{}}
	for _, s := range names {
		s = worldName(s)
		base, wild := strings.CutPrefix(s, "*.")
		if _, ok := dns.IsDomainName(base); !ok || base == "" || strings.Contains(base, "*") {
			return nil, fmt.Errorf("world: %q is not a DNS name", s)
		}
		if wild {
			w.under = append(w.under, "."+base)
		} else {
			w.exact[base] = true
		}
	}
	for {
		var r [4]byte
		_, _ = rand.Read(r[:])
		w.ip = net.IPv4(198, 18+r[0]&1, r[1], 1+r[2]%254)
		if !w.ip.Equal(n.ip) {
			break
		}
	}
	n.worldMu.Lock()
	defer n.worldMu.Unlock()
	if n.world != nil {
		return nil, errors.New("world: the node already has one")
	}
	if err := w.startNetns(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.teardown()
		}
	}()
	nsPath := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), w.tid)
	peer := "aklv" + strings.TrimPrefix(n.bridge, "akl")
	for _, c := range [][]string{
		{"ip", "link", "add", w.link, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", strconv.Itoa(w.tid)},
		{"ip", "link", "set", w.link, "master", n.bridge, "up"},
		{"nsenter", "--net=" + nsPath, "ip", "link", "set", peer, "name", "eth0"},
		{"nsenter", "--net=" + nsPath, "ip", "addr", "add", WorldGateway + "/24", "dev", "eth0"},
		{"nsenter", "--net=" + nsPath, "ip", "addr", "add", w.ip.String() + "/32", "dev", "eth0"},
		{"nsenter", "--net=" + nsPath, "ip", "link", "set", "eth0", "up"},
	} {
		if out, err := exec.CommandContext(ctx, c[0], c[1:]...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("world: %s: %w: %s", strings.Join(c, " "), err, strings.TrimSpace(string(out)))
		}
	}
	w.do(func() { err = w.listen() })
	if err != nil {
		return nil, fmt.Errorf("world: %w", err)
	}
	if err := w.serve(); err != nil {
		return nil, fmt.Errorf("world: %w", err)
	}
	n.world = w
	return w, nil
}

// startNetns makes the world's network namespace, held by one locked
// thread until teardown; once no thread, socket or device refers to it,
// the namespace goes.
func (w *World) startNetns() error {
	w.ns, w.nsd = make(chan func()), make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		defer close(w.nsd)
		runtime.LockOSThread()
		// The thread goes back to the host's namespace when done and
		// lives on. It must not end: a thread's end sends the parent
		// death signal to the children it started, and this one may have
		// started the lab's servers (they ask for SIGKILL).
		host, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("world: %w", err)
			runtime.UnlockOSThread()
			return
		}
		defer unix.Close(host)
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("world: unshare(CLONE_NEWNET): %w", err)
			runtime.UnlockOSThread()
			return
		}
		w.tid = unix.Gettid()
		errc <- nil
		for f := range w.ns {
			f()
		}
		if unix.Setns(host, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else the thread stays locked and ends with the goroutine
	}()
	if err := <-errc; err != nil {
		<-w.nsd
		w.ns = nil
		return err
	}
	return nil
}

// do runs f on the namespace's thread: sockets it opens are the world's.
func (w *World) do(f func()) {
	done := make(chan struct{})
	w.ns <- func() { defer close(done); f() }
	<-done
}

// listen opens the world's sockets; it runs in its namespace.
func (w *World) listen() error {
	at := func(port int) string { return net.JoinHostPort(w.ip.String(), strconv.Itoa(port)) }
	pc, err := net.ListenPacket("udp4", at(WorldDNSPort))
	if err != nil {
		return err
	}
	w.dnsUDP = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(w.answer)}
	ln, err := net.Listen("tcp4", at(WorldDNSPort))
	if err != nil {
		return err
	}
	w.dnsTCP = &dns.Server{Listener: ln, Handler: dns.HandlerFunc(w.answer)}
	hl, err := net.Listen("tcp4", at(WorldHTTPPort))
	if err != nil {
		return err
	}
	w.http = &http.Server{Handler: http.HandlerFunc(w.hello), ReadHeaderTimeout: 10 * time.Second}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		_ = w.http.Serve(hl)
	}()
	if w.tcp, err = net.Listen("tcp4", at(WorldTCPPort)); err != nil {
		return err
	}
	w.udp, err = net.ListenPacket("udp4", at(WorldUDPPort))
	return err
}

// serve starts the goroutines that serve the world's sockets.
func (w *World) serve() error {
	started := make(chan error, 2)
	for _, s := range []*dns.Server{w.dnsUDP, w.dnsTCP} {
		s.NotifyStartedFunc = func() { started <- nil }
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			if err := s.ActivateAndServe(); err != nil && !w.isClosed() {
				started <- fmt.Errorf("dns: %w", err)
			}
		}()
	}
	for range 2 {
		if err := <-started; err != nil {
			return err
		}
	}
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		for {
			c, err := w.tcp.Accept()
			if err != nil {
				return
			}
			w.mu.Lock()
			w.accepted++
			w.mu.Unlock()
			c.Close()
		}
	}()
	go func() {
		defer w.wg.Done()
		buf := make([]byte, 65536)
		for {
			if _, _, err := w.udp.ReadFrom(buf); err != nil {
				return
			}
			w.mu.Lock()
			w.datagrams++
			w.mu.Unlock()
		}
	}()
	return nil
}

func (w *World) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// knows reports whether the world answers for name (normalized).
func (w *World) knows(name string) bool {
	if w.exact[name] {
		return true
	}
	for _, u := range w.under {
		if strings.HasSuffix(name, u) {
			return true
		}
	}
	return false
}

// answer is the DNS server's handler.
func (w *World) answer(rw dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.Authoritative = true
	switch {
	case q.Opcode != dns.OpcodeQuery:
		m.Rcode = dns.RcodeNotImplemented
	case len(q.Question) != 1:
		m.Rcode = dns.RcodeFormatError
	default:
		qq := q.Question[0]
		name := worldName(qq.Name)
		w.mu.Lock()
		w.queries[name]++
		w.mu.Unlock()
		switch {
		case !w.knows(name):
			m.Rcode = dns.RcodeNameError
		case qq.Qclass == dns.ClassINET && (qq.Qtype == dns.TypeA || qq.Qtype == dns.TypeANY):
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: qq.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A:   w.ip.To4(),
			})
		}
	}
	_ = rw.WriteMsg(m)
}

// hello is the HTTP server's handler.
func (w *World) hello(rw http.ResponseWriter, r *http.Request) {
	w.mu.Lock()
	w.requests = append(w.requests, r.Host)
	w.mu.Unlock()
	rw.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(rw, "world %s\n", r.Host)
}

// IP is the world's address in WorldNet, where it serves.
func (w *World) IP() net.IP { return w.ip }

// Queries counts the DNS queries for name (any type, answered or not).
func (w *World) Queries(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.queries[worldName(name)]
}

// Requests lists the Host of every HTTP request, in order.
func (w *World) Requests() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.requests...)
}

// Accepted counts the connections accepted on WorldTCPPort.
func (w *World) Accepted() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.accepted
}

// Datagrams counts the datagrams received on WorldUDPPort.
func (w *World) Datagrams() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.datagrams
}

// Close stops the world: its servers and their goroutines, its veth and
// its namespace. The counters still read what they last counted.
func (w *World) Close() {
	w.node.worldMu.Lock()
	defer w.node.worldMu.Unlock()
	if w.node.world == w {
		w.node.world = nil
	}
	w.teardown()
}

// teardown undoes what StartWorld did, as far as it got.
func (w *World) teardown() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	for _, s := range []*dns.Server{w.dnsUDP, w.dnsTCP} {
		if s == nil {
			continue
		}
		if s.Shutdown() != nil {
			// Not started: close its socket here.
			if s.PacketConn != nil {
				s.PacketConn.Close()
			}
			if s.Listener != nil {
				s.Listener.Close()
			}
		}
	}
	if w.http != nil {
		_ = w.http.Close()
	}
	if w.tcp != nil {
		w.tcp.Close()
	}
	if w.udp != nil {
		w.udp.Close()
	}
	w.wg.Wait()
	// Deleting one end deletes the pair, at once (a namespace's own
	// devices go when the kernel gets round to the namespace).
	_ = exec.Command("ip", "link", "del", w.link).Run()
	if w.ns != nil {
		close(w.ns)
		<-w.nsd
		w.ns = nil
	}
}

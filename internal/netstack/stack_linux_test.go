package netstack_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/netstack"
	"github.com/agentkernel/agentkernel/internal/netstack/netnstest"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// refusedAddr is the sandbox-side destination the test handler refuses
// (TCP: Reject; UDP: error). noAnswerAddr gets no answer at all from
// Handler.TCP.
var (
	refusedAddr  = netip.MustParseAddr("198.18.0.99")
	refusedAddr6 = netip.MustParseAddr("2001:2::99")
	noAnswerAddr = netip.MustParseAddr("198.18.0.98")
	answerA      = netip.MustParseAddr("198.18.0.7")
)

// testHandler is a test-only Handler with no policy at all: it connects
// every TCP connection and UDP flow to the same port on the host's
// loopback (IPv4 or IPv6 like the sandbox's destination), refuses the
// test's refused address, and answers every DNS A question with answerA.
type testHandler struct {
	dnsQueries atomic.Int64
	wg         sync.WaitGroup
}

func loopbackFor(dst netip.AddrPort) string {
	if dst.Addr().Is4() {
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(dst.Port())))
	}
	return net.JoinHostPort("::1", strconv.Itoa(int(dst.Port())))
}

func (h *testHandler) TCP(req netstack.TCPRequest) {
	dst := req.Flow().Dst
	switch dst.Addr() {
	case refusedAddr, refusedAddr6:
		req.Reject()
		return
	case noAnswerAddr:
		return
	}
	up, err := net.Dial("tcp", loopbackFor(dst))
	if err != nil {
		req.Reject()
		return
	}
	c, err := req.Accept()
	if err != nil {
		up.Close()
		return
	}
	netstack.Splice(c, up)
}

func (h *testHandler) UDP(ctx context.Context, f netstack.Flow) (net.Conn, error) {
	if f.Dst.Addr() == refusedAddr || f.Dst.Addr() == refusedAddr6 {
		return nil, errors.New("refused by the test")
	}
	return net.Dial("udp", loopbackFor(f.Dst))
}

func (h *testHandler) DNS(ctx context.Context, src netip.AddrPort, q []byte) ([]byte, error) {
	h.dnsQueries.Add(1)
	return answerDNS(q)
}

// answerDNS answers a one-question query: an A question gets answerA,
// any other type an empty answer.
func answerDNS(q []byte) ([]byte, error) {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:]) != 1 {
		return nil, errors.New("not a one-question query")
	}
	i := 12
	for i < len(q) && q[i] != 0 {
		i += int(q[i]) + 1
	}
	if i+5 > len(q) {
		return nil, errors.New("short question")
	}
	qtype := binary.BigEndian.Uint16(q[i+1:])
	r := append([]byte(nil), q[:i+5]...)
	r[2] |= 0x80 // response
	r[3] = 0x80  // recursion available, no error
	binary.BigEndian.PutUint16(r[8:], 0)
	binary.BigEndian.PutUint16(r[10:], 0)
	if qtype == 1 {
		binary.BigEndian.PutUint16(r[6:], 1)
		a := answerA.As4()
		r = append(r, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4)
		r = append(r, a[:]...)
	} else {
		binary.BigEndian.PutUint16(r[6:], 0)
	}
	return r, nil
}

type env struct {
	ns *netnstest.Netns
	st *netstack.Stack
	h  *testHandler
}

func start(t testing.TB) *env { return startWith(t, nil) }

// startWith starts a stack whose Config edit may change first.
func startWith(t testing.TB, edit func(*netstack.Config)) *env {
	t.Helper()
	ns, f := netnstest.NewTUN(t)
	h := &testHandler{}
	cfg := netstack.Config{TUN: f, Handler: h, UDPIdleTimeout: 2 * time.Second}
	if edit != nil {
		edit(&cfg)
	}
	st, err := netstack.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &env{ns: ns, st: st, h: h}
}

// dial connects from inside the sandbox's namespace.
func (e *env) dial(network, addr string) (net.Conn, error) {
	var c net.Conn
	var err error
	e.ns.Do(func() { c, err = net.DialTimeout(network, addr, 5*time.Second) })
	return c, err
}

// listenHost listens on the host's loopback; port 0 picks one.
func listenHost(t testing.TB, network, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func portOf(a net.Addr) int { return a.(*net.TCPAddr).Port }

// serve runs f for each connection of ln.
func serve(ln net.Listener, f func(net.Conn)) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); f(c) }()
		}
	}()
}

// sinkServer reads until EOF and answers with the SHA-256 of what it read.
func sinkServer(c net.Conn) {
	h := sha256.New()
	if _, err := io.Copy(h, c); err != nil {
		return
	}
	c.Write(h.Sum(nil))
}

// sourceServer reads a decimal length and a seed, sends that many
// pseudo-random bytes and closes.
func sourceServer(c net.Conn) {
	var n int64
	var seed uint64
	if _, err := fmt.Fscan(c, &n, &seed); err != nil {
		return
	}
	io.Copy(c, io.LimitReader(newRand(seed), n))
}

type randReader struct{ r *rand.ChaCha8 }

func newRand(seed uint64) io.Reader {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	return randReader{rand.NewChaCha8(s)}
}
func (r randReader) Read(p []byte) (int, error) { return r.r.Read(p) }

const streamSize = 48 << 20

func TestTCPIntegrity(t *testing.T) {
	e := start(t)
	sink4 := listenHost(t, "tcp", "127.0.0.1:0")
	serve(sink4, sinkServer)
	port := portOf(sink4.Addr())
	src4 := listenHost(t, "tcp", "127.0.0.1:0")
	serve(src4, sourceServer)
	sink6 := listenHost(t, "tcp6", "[::1]:"+strconv.Itoa(port))
	serve(sink6, sinkServer)
	src6 := listenHost(t, "tcp6", "[::1]:"+strconv.Itoa(portOf(src4.Addr())))
	serve(src6, sourceServer)

	for _, dst := range []string{"198.18.0.1", "2001:2::1"} {
		t.Run("upload "+dst, func(t *testing.T) {
			c, err := e.dial("tcp", net.JoinHostPort(dst, strconv.Itoa(port)))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			want := sha256.New()
			if _, err := io.Copy(io.MultiWriter(c, want), io.LimitReader(newRand(1), streamSize)); err != nil {
				t.Fatal(err)
			}
			// Half-close: the server sees EOF and still answers.
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Sum(nil)) {
				t.Fatalf("the server's digest %x differs from the data sent %x", got, want.Sum(nil))
			}
		})
		t.Run("download "+dst, func(t *testing.T) {
			c, err := e.dial("tcp", net.JoinHostPort(dst, strconv.Itoa(portOf(src4.Addr()))))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "%d 7\n", streamSize)
			got := sha256.New()
			n, err := io.Copy(got, c)
			if err != nil {
				t.Fatal(err)
			}
			want := sha256.New()
			io.Copy(want, io.LimitReader(newRand(7), streamSize))
			if n != streamSize || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
				t.Fatalf("got %d bytes with digest %x, want %d with %x", n, got.Sum(nil), streamSize, want.Sum(nil))
			}
		})
	}
	if m := e.st.Metrics(); m.TCPAccepted < 4 || m.RxBytes < 2*streamSize || m.TxBytes < 2*streamSize {
		t.Errorf("metrics do not count the streams: %+v", m)
	}
}

func TestTCPReject(t *testing.T) {
	e := start(t)
	for _, dst := range []string{refusedAddr.String(), noAnswerAddr.String(), "198.18.0.1", refusedAddr6.String()} {
		// 198.18.0.1:1 has no server on the host: the handler's dial
		// fails and it rejects.
		start := time.Now()
		c, err := e.dial("tcp", net.JoinHostPort(dst, "1"))
		if err == nil {
			c.Close()
			t.Fatalf("connecting to %s succeeded", dst)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("connecting to %s: %v, want connection refused", dst, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("the refusal of %s took %v", dst, d)
		}
	}
	if m := e.st.Metrics(); m.TCPRejected != 4 {
		t.Errorf("TCPRejected = %d, want 4", m.TCPRejected)
	}
}

func TestMaxTCPConns(t *testing.T) {
	e := startWith(t, func(c *netstack.Config) { c.MaxTCPConns = 2 })
	ln := listenHost(t, "tcp", "127.0.0.1:0")
	serve(ln, sinkServer)
	addr := "198.18.0.1:" + strconv.Itoa(portOf(ln.Addr()))
	var held []net.Conn
	for i := 0; i < 2; i++ {
		c, err := e.dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	if c, err := e.dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("a third connection over the cap of 2: %v, want connection refused", err)
	}
	// Closing one (the handler closes its end after the sink's answer)
	// gives its place back.
	held[0].(*net.TCPConn).CloseWrite()
	io.ReadAll(held[0])
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := e.dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no place after a connection closed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDNS(t *testing.T) {
	e := start(t)
	for _, server := range []string{"10.0.2.3:53", "[fd00::3]:53"} {
		for _, network := range []string{"udp", "tcp"} {
			r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return e.dial(network, server)
			}}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			addrs, err := r.LookupNetIP(ctx, "ip4", "example.test")
			cancel()
			if err != nil {
				var snmp []byte
				e.ns.Do(func() { snmp, _ = os.ReadFile("/proc/thread-self/net/snmp6") })
				t.Fatalf("%s %s: %v (handler saw %d queries, metrics %+v)\n%s", network, server, err, e.h.dnsQueries.Load(), e.st.Metrics(), snmp)
			}
			if len(addrs) != 1 || addrs[0] != answerA {
				t.Errorf("%s %s answered %v, want %v", network, server, addrs, answerA)
			}
		}
	}
	// Several queries over one TCP connection.
	c, err := e.dial("tcp", "10.0.2.3:53")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 'a', 0, 0, 1, 0, 1}
	for i := 0; i < 3; i++ {
		binary.Write(c, binary.BigEndian, uint16(len(q)))
		c.Write(q)
		var n uint16
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if err := binary.Read(c, binary.BigEndian, &n); err != nil {
			t.Fatal(err)
		}
		reply := make([]byte, n)
		if _, err := io.ReadFull(c, reply); err != nil {
			t.Fatal(err)
		}
		if reply[0] != 0x12 || reply[1] != 0x34 || reply[2]&0x80 == 0 {
			t.Fatalf("reply %x", reply)
		}
	}
	if got := e.h.dnsQueries.Load(); got < 7 {
		t.Errorf("the handler saw %d DNS queries, want at least 7", got)
	}
	if m := e.st.Metrics(); m.DNSQueries < 7 {
		t.Errorf("DNSQueries = %d", m.DNSQueries)
	}
}

func udpEcho(t *testing.T, network, addr string) int {
	pc, err := net.ListenPacket(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).Port
}

func TestUDP(t *testing.T) {
	e := start(t)
	port := udpEcho(t, "udp4", "127.0.0.1:0")
	udpEcho(t, "udp6", "[::1]:"+strconv.Itoa(port))
	for _, dst := range []string{"198.18.0.1", "2001:2::1"} {
		c, err := e.dial("udp", net.JoinHostPort(dst, strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		buf := make([]byte, 65535)
		for i, size := range []int{1, 1400, 9000, 60000} {
			msg := bytes.Repeat([]byte{byte(i + 1)}, size)
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := c.Read(buf)
			if err != nil {
				t.Fatalf("%s: echo of %d bytes: %v", dst, size, err)
			}
			if !bytes.Equal(buf[:n], msg) {
				t.Fatalf("%s: echo of %d bytes came back as %d bytes", dst, size, n)
			}
		}
	}
	for _, dst := range []string{refusedAddr.String(), refusedAddr6.String()} {
		c, err := e.dial("udp", net.JoinHostPort(dst, "9"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("exfiltrate"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 10))
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("UDP to %s: %v, want connection refused (port unreachable)", dst, err)
		}
	}
	if m := e.st.Metrics(); m.UDPFlows != 2 || m.UDPRefused != 2 {
		t.Errorf("UDPFlows = %d, UDPRefused = %d, want 2 and 2", m.UDPFlows, m.UDPRefused)
	}
}

func freePort(t testing.TB) int {
	ln := listenHost(t, "tcp", "127.0.0.1:0")
	p := portOf(ln.Addr())
	ln.Close()
	return p
}

func TestPublish(t *testing.T) {
	e := start(t)
	var ln net.Listener
	var err error
	e.ns.Do(func() { ln, err = net.Listen("tcp", "0.0.0.0:8080") })
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peers := make(chan string, 10)
	serve(ln, func(c net.Conn) {
		peers <- c.RemoteAddr().String()
		sinkServer(c)
	})

	hostPort := freePort(t)
	m := sandbox.PortMapping{HostPort: uint16(hostPort), SandboxPort: 8080}
	pub, err := e.st.Publish(m)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(hostPort))
		if err != nil {
			t.Fatal(err)
		}
		want := sha256.New()
		io.Copy(io.MultiWriter(c, want), io.LimitReader(newRand(uint64(i)), 4<<20))
		c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || !bytes.Equal(got, want.Sum(nil)) {
			t.Fatalf("through the published port: digest %x, %v", got, err)
		}
		if p := <-peers; !strings.HasPrefix(p, "10.0.2.2:") {
			t.Errorf("the sandbox saw the connection from %s, want the gateway 10.0.2.2", p)
		}
	}

	// The port is taken now.
	if _, err := e.st.Publish(m); err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Errorf("publishing a taken port: %v", err)
	}
	// A port nothing listens on in the sandbox: the host connection is
	// closed at once.
	p2 := freePort(t)
	pub2, err := e.st.Publish(sandbox.PortMapping{HostPort: uint16(p2), SandboxPort: 8081})
	if err != nil {
		t.Fatal(err)
	}
	defer pub2.Close()
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(p2))
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a published port without a server: read %d, %v", n, err)
	}
	c.Close()

	pub.Close()
	if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(hostPort)); err == nil {
		c.Close()
		t.Error("the port is still published after Close")
	}
	if _, err := e.st.Publish(sandbox.PortMapping{HostPort: 1, SandboxPort: 1, Proto: "udp"}); err == nil {
		t.Error("publishing a UDP port succeeded")
	}
}

func TestCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		testenv.Missing(t, "needs curl")
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		testenv.Missing(t, "needs nsenter")
	}
	e := start(t)
	ln := listenHost(t, "tcp", "127.0.0.1:0")
	serve(ln, func(c net.Conn) {
		buf := make([]byte, 4096)
		c.Read(buf)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
	})
	out, err := exec.Command("nsenter", "--net="+e.ns.Path(), "curl", "-sS", "--max-time", "5",
		fmt.Sprintf("http://198.18.0.1:%d/", portOf(ln.Addr()))).CombinedOutput()
	if err != nil || string(out) != "hello" {
		t.Fatalf("curl: %v: %s", err, out)
	}
	// A refused connection: curl's "Couldn't connect" (exit 7), at once.
	start := time.Now()
	out, err = exec.Command("nsenter", "--net="+e.ns.Path(), "curl", "-sS", "--max-time", "5",
		fmt.Sprintf("http://%s:1/", refusedAddr)).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 || time.Since(start) > 2*time.Second {
		t.Errorf("curl to a refused address: %v after %v: %s", err, time.Since(start), out)
	}
}

func countFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestCloseLeavesNothing(t *testing.T) {
	// A first stack, so that what the runtime and gVisor start once per
	// process is running before counting.
	func() {
		e := start(t)
		e.st.Close()
	}()
	tcpLn := listenHost(t, "tcp", "127.0.0.1:0")
	serve(tcpLn, sinkServer)
	udpPort := udpEcho(t, "udp4", "127.0.0.1:0")
	time.Sleep(100 * time.Millisecond)
	goroutines, fds := runtime.NumGoroutine(), countFDs(t)

	ns, f := netnstest.NewTUN(t)
	st, err := netstack.New(netstack.Config{TUN: f, Handler: &testHandler{}})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{ns: ns, st: st}
	pub, err := st.Publish(sandbox.PortMapping{HostPort: uint16(freePort(t)), SandboxPort: 8080})
	if err != nil {
		t.Fatal(err)
	}
	_ = pub
	var open []net.Conn
	for i := 0; i < 200; i++ {
		c, err := e.dial("tcp", "198.18.0.1:"+strconv.Itoa(portOf(tcpLn.Addr())))
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("x"))
		if i%10 == 0 {
			open = append(open, c) // still open when the stack closes
			continue
		}
		c.(*net.TCPConn).CloseWrite()
		io.ReadAll(c)
		c.Close()
	}
	for i := 0; i < 20; i++ {
		c, err := e.dial("udp", "198.18.0.1:"+strconv.Itoa(udpPort))
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("x"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 10)); err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		r, _ := e.dial("udp", "10.0.2.3:53")
		r.Write([]byte{1, 2, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 'a', 0, 0, 1, 0, 1})
		r.SetReadDeadline(time.Now().Add(5 * time.Second))
		r.Read(make([]byte, 512))
		r.Close()
	}
	closed := make(chan struct{})
	go func() { st.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("Close has not returned after 15s\n%s", buf[:runtime.Stack(buf, true)])
	}
	for _, c := range open {
		c.Close()
	}
	if _, err := st.Publish(sandbox.PortMapping{HostPort: uint16(freePort(t)), SandboxPort: 1}); !errors.Is(err, netstack.ErrClosed) {
		t.Errorf("Publish after Close: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, n := runtime.NumGoroutine(), countFDs(t)
		if g <= goroutines+1 && n <= fds { // +1: the namespace thread's goroutine, until the test ends
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("after Close: %d goroutines (before %d), %d fds (before %d)\n%s", g, goroutines, n, fds, buf)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCloseUnderLoad closes stacks while the sandbox keeps sending: the
// packet being delivered when the NIC goes must not hold Close up.
func TestCloseUnderLoad(t *testing.T) {
	ln := listenHost(t, "tcp", "127.0.0.1:0")
	serve(ln, func(c net.Conn) { io.Copy(c, c) })
	for i := 0; i < 10; i++ {
		e := start(t)
		c, err := e.dial("tcp", "198.18.0.1:"+strconv.Itoa(portOf(ln.Addr())))
		if err != nil {
			t.Fatal(err)
		}
		go io.Copy(io.Discard, c)
		go func() {
			buf := make([]byte, 64<<10)
			for {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
		time.Sleep(30 * time.Millisecond)
		closed := make(chan struct{})
		go func() { e.st.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(15 * time.Second):
			buf := make([]byte, 1<<20)
			t.Fatalf("Close under load has not returned after 15s\n%s", buf[:runtime.Stack(buf, true)])
		}
		c.Close()
	}
}

// TestPacketsBeforeStart: what the sandbox sent before the stack started
// (a connection, a DNS query, waiting in the device: the helper starts on
// the sandbox's first packet) is answered as soon as it starts, not
// reset, dropped or left to a retransmission.
func TestPacketsBeforeStart(t *testing.T) {
	ns, f := netnstest.NewTUN(t)
	ln := listenHost(t, "tcp", "127.0.0.1:0")
	serve(ln, func(c net.Conn) { c.Write([]byte("hi")); c.Close() })
	type result struct {
		err  error
		took time.Duration
	}
	dialed, resolved := make(chan result, 1), make(chan result, 1)
	// Sockets made in the namespace keep it: made there, used from here,
	// so that the connection and the DNS query both leave before the
	// stack exists.
	var tcpFd int
	var udp net.Conn
	var err error
	ns.Do(func() {
		if tcpFd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err == nil {
			udp, err = net.Dial("udp", "10.0.2.3:53")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	go func() {
		start := time.Now()
		err := unix.Connect(tcpFd, &unix.SockaddrInet4{Port: portOf(ln.Addr()), Addr: [4]byte{198, 18, 7, 7}})
		if err == nil {
			c, _ := net.FileConn(os.NewFile(uintptr(tcpFd), "tcp"))
			if c != nil {
				_, err = io.ReadAll(c)
				c.Close()
			}
		}
		dialed <- result{err, time.Since(start)}
	}()
	go func() {
		q := new(dns.Msg).SetQuestion("x.test.", dns.TypeA)
		b, _ := q.Pack()
		start := time.Now()
		_, err := udp.Write(b)
		if err == nil {
			udp.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 512)
			var n int
			if n, err = udp.Read(buf); err == nil {
				r := new(dns.Msg)
				if err = r.Unpack(buf[:n]); err == nil && len(r.Answer) != 1 {
					err = fmt.Errorf("answer %v", r)
				}
			}
		}
		resolved <- result{err, time.Since(start)}
	}()
	time.Sleep(100 * time.Millisecond) // both wait in the device
	st, err := netstack.New(netstack.Config{TUN: f, Handler: &testHandler{}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for what, ch := range map[string]chan result{"connection": dialed, "DNS query": resolved} {
		r := <-ch
		if r.err != nil || r.took > 900*time.Millisecond {
			t.Errorf("the %s sent before the stack started: %v after %v (a retransmission, or a reset)", what, r.err, r.took)
		}
	}
}

// TestHeldStack: a stack made with Held parses nothing the sandbox sends
// until Start (its owner drops privileges in between), and then serves
// what waited in the device.
func TestHeldStack(t *testing.T) {
	ns, f := netnstest.NewTUN(t)
	ln := listenHost(t, "tcp", "127.0.0.1:0")
	serve(ln, func(c net.Conn) { c.Write([]byte("hi")) })
	st, err := netstack.New(netstack.Config{TUN: f, Handler: &testHandler{}, Held: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got := make(chan error, 1)
	go func() {
		var c net.Conn
		var err error
		ns.Do(func() { c, err = net.DialTimeout("tcp", "198.18.0.1:"+strconv.Itoa(portOf(ln.Addr())), 5*time.Second) })
		if err == nil {
			var b []byte
			b, err = io.ReadAll(io.LimitReader(c, 2))
			if err == nil && string(b) != "hi" {
				err = fmt.Errorf("read %q", b)
			}
			c.Close()
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if m := st.Metrics(); m.RxPackets != 0 || m.TCPAccepted != 0 {
		t.Fatalf("a held stack read from its device: %+v", m)
	}
	select {
	case err := <-got:
		t.Fatalf("the connection ended before Start: %v", err)
	default:
	}
	st.Start()
	if err := <-got; err != nil {
		t.Fatalf("the connection that waited for Start: %v", err)
	}
}

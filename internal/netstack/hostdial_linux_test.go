package netstack_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/netstack"
	"github.com/agentkernel/agentkernel/internal/netstack/netnstest"
)

// DialHost against real loopback servers, both families: data both ways,
// half-close passed on, a reset on SetLinger(0), the options set, a
// refused port and a cancelled dial.
func TestDialHost(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			host := "127.0.0.1:0"
			if network == "tcp6" {
				host = "[::1]:0"
			}
			ln, err := net.Listen(network, host)
			if err != nil {
				t.Skipf("no %s loopback: %v", network, err)
			}
			defer ln.Close()
			addr := ln.Addr().(*net.TCPAddr).AddrPort()
			got := make(chan []byte, 1)
			rst := make(chan error, 1)
			go func() {
				// First connection: echo what comes until EOF, then say bye.
				s, err := ln.Accept()
				if err != nil {
					got <- nil
					return
				}
				b, _ := io.ReadAll(s)
				s.Write(append([]byte("bye:"), b...))
				s.Close()
				got <- b
				// Second: read until the client's reset.
				s, err = ln.Accept()
				if err != nil {
					rst <- err
					return
				}
				_, err = io.ReadAll(s)
				rst <- err
				s.Close()
			}()

			c, err := netstack.DialHost(context.Background(), addr, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if ra := c.RemoteAddr().(*net.TCPAddr).AddrPort(); ra != addr {
				t.Errorf("RemoteAddr %v, want %v", ra, addr)
			}
			if la := c.LocalAddr().(*net.TCPAddr); la.Port == 0 {
				t.Errorf("LocalAddr %v has no port", la)
			}
			sc, ok := c.(syscall.Conn)
			if !ok {
				t.Fatalf("%T is not a syscall.Conn", c)
			}
			rc, _ := sc.SyscallConn()
			rc.Control(func(fd uintptr) {
				for _, o := range []struct {
					level, opt, want int
				}{{unix.IPPROTO_TCP, unix.TCP_NODELAY, 1}, {unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1}, {unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 30}} {
					if v, err := unix.GetsockoptInt(int(fd), o.level, o.opt); err != nil || v != o.want {
						t.Errorf("option %d/%d = %d, %v; want %d", o.level, o.opt, v, err, o.want)
					}
				}
			})
			if _, err := c.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(c)
			if err != nil || string(b) != "bye:hello" {
				t.Fatalf("read %q, %v; want bye:hello", b, err)
			}
			if s := <-got; string(s) != "hello" {
				t.Fatalf("server got %q", s)
			}
			c.Close()
			if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
				t.Errorf("read after Close: %v, want net.ErrClosed", err)
			}

			c, err = netstack.DialHost(context.Background(), addr, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.(interface{ SetLinger(int) error }).SetLinger(0)
			c.Close()
			if err := <-rst; !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("server after SetLinger(0) and Close: %v, want a reset", err)
			}

			ln.Close()
			if _, err := netstack.DialHost(context.Background(), addr, 0); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("dial to a closed port: %v, want connection refused", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := netstack.DialHost(ctx, addr, 0); !errors.Is(err, context.Canceled) {
				t.Errorf("dial with a cancelled context: %v", err)
			}
		})
	}
}

// A dial that gets no answer ends at its context's deadline.
func TestDialHostTimeout(t *testing.T) {
	// A namespace whose TUN device nobody reads: the SYN is never
	// answered.
	ns, f := netnstest.NewTUN(t)
	defer f.Close()
	var err error
	var took time.Duration
	ns.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		_, err = netstack.DialHost(ctx, netip.MustParseAddrPort("198.18.0.1:80"), 0)
		took = time.Since(t0)
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("dial: %v, want the deadline", err)
	}
	if took < 150*time.Millisecond || took > 5*time.Second {
		t.Errorf("dial took %v, want about 200ms", took)
	}
}

// BenchmarkHostDial compares DialHost with net.Dialer (the same options)
// on a loopback server: connect and close with a reset.
//
//	go test ./internal/netstack -run '^$' -bench HostDial -cpu 1
func BenchmarkHostDial(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	addr := ln.Addr().(*net.TCPAddr).AddrPort()
	nd := net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: -1, Count: -1}}
	dials := map[string]func() (net.Conn, error){
		"DialHost":   func() (net.Conn, error) { return netstack.DialHost(context.Background(), addr, 30*time.Second) },
		"net.Dialer": func() (net.Conn, error) { return nd.DialContext(context.Background(), "tcp", addr.String()) },
	}
	for _, name := range []string{"DialHost", "net.Dialer"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				c, err := dials[name]()
				if err != nil {
					b.Fatal(err)
				}
				c.(interface{ SetLinger(int) error }).SetLinger(0)
				c.Close()
			}
		})
	}
}

package tundev_test

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/netstack/netnstest"
	"github.com/agentkernel/agentkernel/internal/netstack/tundev"
)

// readUDPPacket reads the next packet from the TUN device, which must be
// a UDP packet: Configure keeps the kernel from sending anything of its
// own (router solicitations, MLD reports, duplicate address detection).
func readUDPPacket(t *testing.T, f *os.File) []byte {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	buf := make([]byte, 65536)
	for time.Now().Before(deadline) {
		fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 100); err != nil || n == 0 {
			continue
		}
		n, err := unix.Read(int(f.Fd()), buf)
		if err != nil {
			t.Fatalf("reading the TUN device: %v", err)
		}
		if n < tundev.VnetHdrLen {
			t.Fatalf("a read of %d bytes has no virtio-net header", n)
		}
		if gso := buf[1]; gso != 0 {
			t.Errorf("virtio-net header with gso_type %d: no segmentation offload was turned on", gso)
		}
		p := buf[tundev.VnetHdrLen:n]
		n -= tundev.VnetHdrLen
		switch {
		case n >= 20 && p[0]>>4 == 4 && p[9] == unix.IPPROTO_UDP:
			return append([]byte(nil), p...)
		case n >= 40 && p[0]>>4 == 6 && p[6] == unix.IPPROTO_UDP:
			return append([]byte(nil), p...)
		}
		t.Fatalf("the kernel sent a packet of its own through the device: % x", p[:min(len(p), 48)])
	}
	t.Fatal("no UDP packet came out of the TUN device")
	return nil
}

func TestOpenConfigure(t *testing.T) {
	ns := netnstest.New(t)
	l := tundev.DefaultLayout()
	var (
		f   *os.File
		err error
	)
	ns.Do(func() {
		f, err = tundev.Open("eth0")
		if err == nil {
			err = tundev.Configure("eth0", l)
		}
		if err == nil {
			err = tundev.AwaitLocal(l)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	var ifi *net.Interface
	var addrs []net.Addr
	ns.Do(func() {
		ifi, err = net.InterfaceByName("eth0")
		if err == nil {
			addrs, err = ifi.Addrs()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if ifi.MTU != tundev.DefaultMTU {
		t.Errorf("MTU = %d, want %d", ifi.MTU, tundev.DefaultMTU)
	}
	if ifi.Flags&net.FlagUp == 0 {
		t.Errorf("eth0 is not up: %v", ifi.Flags)
	}
	if ifi.Flags&net.FlagMulticast != 0 {
		t.Errorf("eth0 is multicast (it would send MLD reports): %v", ifi.Flags)
	}
	var got []string
	for _, a := range addrs {
		got = append(got, a.String())
	}
	for _, want := range []string{"10.0.2.100/24", "fd00::100/64"} {
		if !strings.Contains(strings.Join(got, " "), want) {
			t.Errorf("eth0 addresses %v lack %s", got, want)
		}
	}
	if strings.Contains(strings.Join(got, " "), "fe80:") {
		t.Errorf("eth0 has a link-local address (duplicate address detection, router solicitations): %v", got)
	}

	// The default routes carry traffic for any address to the device,
	// from the sandbox's addresses; the IPv6 address is usable once
	// AwaitLocal returns (no duplicate address detection).
	for _, c := range []struct {
		dst string
		src netip.Addr
	}{
		{"198.18.0.1:9", l.Addr4.Addr()},
		{"[2001:2::1]:9", l.Addr6.Addr()},
	} {
		var conn net.Conn
		ns.Do(func() { conn, err = net.Dial("udp", c.dst) })
		if err != nil {
			t.Fatalf("dial %s in the namespace: %v", c.dst, err)
		}
		if _, err := conn.Write([]byte("ping")); err != nil {
			t.Fatalf("send to %s: %v", c.dst, err)
		}
		conn.Close()
		p := readUDPPacket(t, f)
		var src, dst netip.Addr
		if p[0]>>4 == 4 {
			src, _ = netip.AddrFromSlice(p[12:16])
			dst, _ = netip.AddrFromSlice(p[16:20])
		} else {
			src, _ = netip.AddrFromSlice(p[8:24])
			dst, _ = netip.AddrFromSlice(p[24:40])
		}
		wantDst := netip.MustParseAddrPort(c.dst).Addr()
		if src != c.src || dst != wantDst {
			t.Errorf("packet for %s went %s -> %s, want %s -> %s", c.dst, src, dst, c.src, wantDst)
		}
	}

	// The device goes away with its descriptor.
	f.Close()
	ns.Do(func() { _, err = net.InterfaceByName("eth0") })
	if err == nil {
		t.Error("eth0 still exists after its descriptor was closed")
	}
}

func TestConfigureErrors(t *testing.T) {
	ns := netnstest.New(t)
	var err error
	ns.Do(func() { err = tundev.Configure("nosuchdev0", tundev.DefaultLayout()) })
	if err == nil || !strings.Contains(err.Error(), "nosuchdev0") {
		t.Errorf("Configure of a missing device: %v", err)
	}
	for _, name := range []string{"", "a/b", "has space", "0123456789abcdef", ".."} {
		if _, err := tundev.Open(name); err == nil {
			t.Errorf("Open(%q) succeeded", name)
		}
	}
	bad := tundev.DefaultLayout()
	bad.Gateway4 = netip.MustParseAddr("10.0.3.2")
	if err := bad.Validate(); err == nil {
		t.Error("a gateway outside the prefix validated")
	}
	bad = tundev.DefaultLayout()
	bad.DNS6 = netip.MustParseAddr("10.0.2.3")
	if err := bad.Validate(); err == nil {
		t.Error("an IPv4 resolver in the IPv6 layout validated")
	}
	bad = tundev.DefaultLayout()
	bad.MTU = 100
	if err := bad.Validate(); err == nil {
		t.Error("MTU 100 validated")
	}
	v4only := tundev.DefaultLayout()
	v4only.Addr6, v4only.Gateway6, v4only.DNS6 = netip.Prefix{}, netip.Addr{}, netip.Addr{}
	if err := v4only.Validate(); err != nil {
		t.Errorf("an IPv4-only layout: %v", err)
	}
}

// BenchmarkConfigure is what Configure adds to a sandbox's start (a
// device's removal is not counted: it happens when the sandbox ends).
func BenchmarkConfigure(b *testing.B) {
	v4 := tundev.DefaultLayout()
	v4.Addr6, v4.Gateway6, v4.DNS6 = netip.Prefix{}, netip.Addr{}, netip.Addr{}
	b.Run("v4+v6", func(b *testing.B) { benchConfigure(b, tundev.DefaultLayout()) })
	b.Run("v4", func(b *testing.B) { benchConfigure(b, v4) })
}

func benchConfigure(b *testing.B, l tundev.Layout) {
	ns := netnstest.New(b)
	var err error
	ns.Do(func() {
		for i := 0; i < b.N && err == nil; i++ {
			b.StopTimer()
			var f *os.File
			if f, err = tundev.Open("eth0"); err != nil {
				return
			}
			b.StartTimer()
			err = tundev.Configure("eth0", l)
			b.StopTimer()
			f.Close()
		}
	})
	if err != nil {
		b.Fatal(err)
	}
}

package tundev

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Open creates the TUN device name in the network namespace of the
// calling thread, and returns its descriptor in blocking mode,
// close-on-exec. Each read and write is one whole IP packet after a
// virtio-net header (VnetHdrLen bytes, IFF_VNET_HDR), and the device
// offloads checksums (TUN_F_CSUM): the sandbox's kernel leaves the TCP
// and UDP checksums of what it sends partial, and takes a packet whose
// header says so without checking them (see VnetHdrLen). The device
// lives as long as the descriptor (and its duplicates) stay open. The
// caller needs CAP_NET_ADMIN in that namespace's user namespace.
//
// The caller must keep its goroutine on the thread whose namespace it
// means (runtime.LockOSThread) for the whole call.
func Open(name string) (*os.File, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, errorf("opening /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, errorf("device name %q: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, errorf("creating TUN device %q: %w", name, err)
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, tunFCsum); err != nil {
		unix.Close(fd)
		return nil, errorf("TUN device %q: checksum offload: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}

func checkName(name string) error {
	if name == "" || len(name) >= unix.IFNAMSIZ {
		return errorf("device name %q must have 1 to %d characters", name, unix.IFNAMSIZ-1)
	}
	for _, c := range []byte(name) {
		if c <= ' ' || c == '/' || c == ':' || c >= 0x7f {
			return errorf("device name %q has a character not allowed in interface names", name)
		}
	}
	if name == "." || name == ".." {
		return errorf("device name %q is not allowed", name)
	}
	return nil
}

// Configure readies the device name in the calling thread's network
// namespace: it keeps the kernel from sending anything through it on its
// own (no IPv6 link-local address, so no duplicate address detection and
// no router solicitations; no multicast, so no MLD reports), so that a
// sandbox's first packet is its own, which is what its owner may wait
// for before it starts the user-space stack; then it sets the MTU, brings
// the device up, gives it the layout's addresses (IPv6 without duplicate
// address detection: nothing else is on the link) and adds the default
// routes through the gateways.
//
// The kernel finishes a new IPv6 address on a work queue of its own
// (AwaitLocal): Configure returns without waiting for it, so that it
// happens while the rest of the sandbox is built.
func Configure(name string, l Layout) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := l.Validate(); err != nil {
		return err
	}
	nl, err := dialNetlink()
	if err != nil {
		return err
	}
	defer nl.close()
	index, err := nl.ifIndex(name)
	if err != nil {
		return err
	}

	// One batch, in this order (the kernel takes them one after the
	// other): quiet before up, IPv6 first so that the kernel finishes
	// it in the background (AwaitLocal) while the rest is set up.
	steps := []struct {
		what string
		m    *message
	}{
		{"keeping " + name + " quiet", nl.quiet(index)},
		{fmt.Sprintf("setting MTU %d and bringing %s up", l.MTU, name), nl.setLink(index, uint32(l.MTU))},
	}
	if l.HasIPv6() {
		steps = append(steps, struct {
			what string
			m    *message
		}{fmt.Sprintf("adding %s to %s", l.Addr6, name), nl.addAddr(index, l.Addr6)})
	}
	steps = append(steps, []struct {
		what string
		m    *message
	}{
		{fmt.Sprintf("adding %s to %s", l.Addr4, name), nl.addAddr(index, l.Addr4)},
		{fmt.Sprintf("adding the default route via %s", l.Gateway4), nl.addDefaultRoute(index, l.Gateway4)},
	}...)
	if l.HasIPv6() {
		steps = append(steps, struct {
			what string
			m    *message
		}{fmt.Sprintf("adding the default route via %s", l.Gateway6), nl.addDefaultRoute(index, l.Gateway6)})
	}
	ms := make([]*message, len(steps))
	for i, st := range steps {
		ms[i] = st.m
	}
	errs, err := nl.batch(ms)
	if err != nil {
		return errorf("configuring %s: %w", name, err)
	}
	if e := errs[0]; e == unix.EAFNOSUPPORT || e == unix.EOPNOTSUPP {
		// No IPv6 in this kernel: only the multicast flag to clear.
		errs[0] = nl.do(nl.quietFlags(index))
	}
	for i, e := range errs {
		if e != nil {
			return errorf("%s: %w", steps[i].what, e)
		}
	}
	return nil
}

// AwaitLocal waits, for at most two seconds, until the layout's IPv6
// address that Configure gave a device is usable. The kernel finishes a
// new IPv6 address (inserts its local route) on a work queue even without
// duplicate address detection, and until then drops the packets sent to
// it. Call it in the device's network namespace before the sandbox's
// command starts.
func AwaitLocal(l Layout) error {
	if !l.HasIPv6() {
		return nil
	}
	nl, err := dialNetlink()
	if err != nil {
		return err
	}
	defer nl.close()
	if err := nl.waitLocal(l.Addr6.Addr()); err != nil {
		return errorf("waiting for %s to become usable: %w", l.Addr6.Addr(), err)
	}
	return nil
}

// ifIndex is the index of the device name (the ioctl works on any
// socket, this one included).
func (n *netlink) ifIndex(name string) (int32, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, errorf("device name %q: %w", name, err)
	}
	if err := unix.IoctlIfreq(n.fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, errorf("no device %q in this network namespace: %w", name, err)
	}
	return int32(ifr.Uint32()), nil
}

// netlink is a NETLINK_ROUTE socket that sends one request at a time and
// waits for its acknowledgement.
type netlink struct {
	fd  int
	seq uint32
}

func dialNetlink() (*netlink, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, errorf("netlink socket: %w", err)
	}
	// Not bound: the kernel binds it (a port id of its own) at the first
	// request.
	return &netlink{fd: fd}, nil
}

func (n *netlink) close() { unix.Close(n.fd) }

// message builds one netlink request: header, fixed part, attributes.
type message struct{ b []byte }

func newMessage(typ, flags uint16, fixed []byte) *message {
	m := &message{b: make([]byte, unix.SizeofNlMsghdr, 128)}
	binary.NativeEndian.PutUint16(m.b[4:], typ)
	binary.NativeEndian.PutUint16(m.b[6:], flags|unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	m.b = append(m.b, fixed...)
	m.pad()
	return m
}

func (m *message) pad() {
	for len(m.b)%4 != 0 {
		m.b = append(m.b, 0)
	}
}

func (m *message) attr(typ uint16, data []byte) {
	var h [unix.SizeofRtAttr]byte
	binary.NativeEndian.PutUint16(h[0:], uint16(unix.SizeofRtAttr+len(data)))
	binary.NativeEndian.PutUint16(h[2:], typ)
	m.b = append(m.b, h[:]...)
	m.b = append(m.b, data...)
	m.pad()
}

func u32(v uint32) []byte {
	b := make([]byte, 4)
	binary.NativeEndian.PutUint32(b, v)
	return b
}

// batch sends ms in one write (the kernel handles them in order, each
// whatever became of the one before) and returns the kernel's answer to
// each: errs[i] for ms[i]; err is a failure of the exchange itself. Only
// the last asks for an acknowledgement: the kernel reports a failed
// request whether asked or not, and the last one's acknowledgement comes
// after every earlier answer.
func (n *netlink) batch(ms []*message) (errs []error, err error) {
	var b []byte
	first := n.seq + 1
	for i, m := range ms {
		n.seq++
		binary.NativeEndian.PutUint32(m.b[0:], uint32(len(m.b)))
		binary.NativeEndian.PutUint32(m.b[8:], n.seq)
		if i < len(ms)-1 {
			flags := binary.NativeEndian.Uint16(m.b[6:])
			binary.NativeEndian.PutUint16(m.b[6:], flags&^unix.NLM_F_ACK)
		}
		b = append(b, m.b...)
	}
	if err := unix.Sendto(n.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	errs = make([]error, len(ms))
	err = n.receive(func(seq uint32, typ uint16, data []byte) (bool, error) {
		if seq < first || seq > n.seq || typ != unix.NLMSG_ERROR {
			return false, nil
		}
		if len(data) < 4 {
			return false, errorf("short netlink acknowledgement")
		}
		if code := int32(binary.NativeEndian.Uint32(data)); code != 0 {
			errs[seq-first] = unix.Errno(-code)
		}
		return seq == n.seq, nil
	})
	return errs, err
}

// do sends m and waits for the kernel's acknowledgement of it.
func (n *netlink) do(m *message) error {
	return n.exchange(m, nil)
}

// exchange sends m and waits for the kernel's acknowledgement of it,
// passing every other message of the reply to f.
func (n *netlink) exchange(m *message, f func(typ uint16, data []byte)) error {
	n.seq++
	binary.NativeEndian.PutUint32(m.b[0:], uint32(len(m.b)))
	binary.NativeEndian.PutUint32(m.b[8:], n.seq)
	if err := unix.Sendto(n.fd, m.b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	var ack error
	err := n.receive(func(seq uint32, typ uint16, data []byte) (bool, error) {
		if seq != n.seq {
			return false, nil
		}
		if typ != unix.NLMSG_ERROR {
			if f != nil {
				f(typ, data)
			}
			return false, nil
		}
		if len(data) < 4 {
			return false, errorf("short netlink acknowledgement")
		}
		if code := int32(binary.NativeEndian.Uint32(data)); code != 0 {
			ack = unix.Errno(-code)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	return ack
}

// receive passes each message the kernel sends to f until f says it is
// done or fails.
func (n *netlink) receive(f func(seq uint32, typ uint16, data []byte) (done bool, err error)) error {
	buf := make([]byte, 8192)
	for {
		k, from, err := unix.Recvfrom(n.fd, buf, 0)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return err
		}
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
			continue // not from the kernel
		}
		for b := buf[:k]; len(b) >= unix.SizeofNlMsghdr; {
			size := int(binary.NativeEndian.Uint32(b[0:]))
			if size < unix.SizeofNlMsghdr || size > len(b) {
				return errorf("malformed netlink reply")
			}
			typ := binary.NativeEndian.Uint16(b[4:])
			seq := binary.NativeEndian.Uint32(b[8:])
			data := b[unix.SizeofNlMsghdr:size]
			if next := (size + 3) &^ 3; next < len(b) {
				b = b[next:]
			} else {
				b = nil
			}
			done, err := f(seq, typ, data)
			if err != nil || done {
				return err
			}
		}
	}
}

// quiet clears the device's multicast flag and turns off its IPv6
// link-local address (addr_gen_mode none), before it is up: the kernel
// takes a link's IPv6 settings after its flags within one request.
func (n *netlink) quiet(index int32) *message {
	m := n.quietFlags(index)
	inet6 := nlattr(unix.IFLA_INET6_ADDR_GEN_MODE, []byte{in6AddrGenModeNone})
	m.attr(unix.IFLA_AF_SPEC, nlattr(unix.AF_INET6, inet6))
	return m
}

// quietFlags clears the device's multicast flag.
func (n *netlink) quietFlags(index int32) *message {
	var ifi unix.IfInfomsg
	ifi.Family = unix.AF_UNSPEC
	ifi.Index = index
	ifi.Change = unix.IFF_MULTICAST
	return newMessage(unix.RTM_NEWLINK, 0, structBytes(&ifi, unix.SizeofIfInfomsg))
}

// in6AddrGenModeNone is IN6_ADDR_GEN_MODE_NONE (linux/if_link.h).
const in6AddrGenModeNone = 1

// nlattr is one attribute (type, data, padding), as nested attributes
// are written inside their parent's data.
func nlattr(typ uint16, data []byte) []byte {
	m := message{}
	m.attr(typ, data)
	return m.b
}

func (n *netlink) setLink(index int32, mtu uint32) *message {
	var ifi unix.IfInfomsg
	ifi.Family = unix.AF_UNSPEC
	ifi.Index = index
	ifi.Flags = unix.IFF_UP
	ifi.Change = unix.IFF_UP
	m := newMessage(unix.RTM_NEWLINK, 0, structBytes(&ifi, unix.SizeofIfInfomsg))
	m.attr(unix.IFLA_MTU, u32(mtu))
	return m
}

func (n *netlink) addAddr(index int32, p netip.Prefix) *message {
	var ifa unix.IfAddrmsg
	ifa.Family = family(p.Addr())
	ifa.Prefixlen = uint8(p.Bits())
	ifa.Scope = unix.RT_SCOPE_UNIVERSE
	ifa.Index = uint32(index)
	flags := uint32(0)
	if p.Addr().Is6() {
		flags = unix.IFA_F_NODAD
	}
	ifa.Flags = uint8(flags)
	m := newMessage(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, structBytes(&ifa, unix.SizeofIfAddrmsg))
	addr := p.Addr().AsSlice()
	m.attr(unix.IFA_LOCAL, addr)
	m.attr(unix.IFA_ADDRESS, addr)
	m.attr(unix.IFA_FLAGS, u32(flags))
	return m
}

func (n *netlink) addDefaultRoute(index int32, gw netip.Addr) *message {
	rt := unix.RtMsg{
		Family:   family(gw),
		Table:    unix.RT_TABLE_MAIN,
		Protocol: unix.RTPROT_BOOT,
		Scope:    unix.RT_SCOPE_UNIVERSE,
		Type:     unix.RTN_UNICAST,
	}
	m := newMessage(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, structBytes(&rt, unix.SizeofRtMsg))
	m.attr(unix.RTA_GATEWAY, gw.AsSlice())
	m.attr(unix.RTA_OIF, u32(uint32(index)))
	return m
}

// waitLocal waits until the kernel routes a to this host (a local
// route), for at most two seconds.
func (n *netlink) waitLocal(a netip.Addr) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		rt := unix.RtMsg{Family: family(a), Dst_len: uint8(a.BitLen())}
		m := newMessage(unix.RTM_GETROUTE, 0, structBytes(&rt, unix.SizeofRtMsg))
		m.attr(unix.RTA_DST, a.AsSlice())
		local := false
		err := n.exchange(m, func(typ uint16, data []byte) {
			if typ == unix.RTM_NEWROUTE && len(data) >= unix.SizeofRtMsg {
				local = data[7] == unix.RTN_LOCAL
			}
		})
		if err != nil && err != unix.ENETUNREACH {
			return err
		}
		if local {
			return nil
		}
		if time.Now().After(deadline) {
			return errorf("no local route yet")
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func family(a netip.Addr) uint8 {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

func structBytes[T any](v *T, size int) []byte {
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(v)), size)...)
}

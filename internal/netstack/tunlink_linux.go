package netstack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/agentkernel/agentkernel/internal/netstack/tundev"
)

// tunLink is the stack's link endpoint on the TUN device: one whole IP
// packet per read and per write, after a virtio-net header
// (tundev.VnetHdrLen) that carries the checksum offload both ways.
//
// It is written here rather than taken from gVisor's fdbased package
// because fdbased leaves a descriptor (its stop eventfd) open for every
// endpoint it makes, and hands each packet from its reader to a
// processor goroutine. Here the descriptor sits in the Go runtime's
// poller: the reader parks like any network read, closing the file is
// what stops it, and it delivers each packet to the stack itself.
type tunLink struct {
	f  *os.File
	rc syscall.RawConn

	mu         sync.RWMutex
	mtu        uint32
	dispatcher stack.NetworkDispatcher
	stopped    bool
	wg         sync.WaitGroup
	// opened is closed by open: the reader reads nothing before, so
	// that packets already waiting in the device (a sandbox that sent
	// before its stack started) meet a stack that is whole (forwarders
	// set, DNS bound), not a NIC that answers them with resets.
	opened   chan struct{}
	openOnce sync.Once
}

// Inbound packets are read into a small view and a large one: a small
// packet (an ACK, a DNS query) keeps only the small one, and the large
// one is used again for the next read.
const (
	smallView = 2048
	largeView = 64<<10 - smallView
)

// newTUNLink takes over tun: it keeps a non-blocking duplicate of the
// descriptor in the runtime's poller and closes tun.
func newTUNLink(tun *os.File, mtu uint32) (*tunLink, error) {
	if mtu > smallView+largeView {
		tun.Close()
		return nil, fmt.Errorf("MTU %d is larger than %d", mtu, smallView+largeView)
	}
	fd, err := unix.FcntlInt(tun.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	tun.Close()
	if err != nil {
		return nil, fmt.Errorf("duplicating the TUN descriptor: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUN descriptor: %w", err)
	}
	f := os.NewFile(uintptr(fd), tun.Name())
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("TUN descriptor: %w", err)
	}
	return &tunLink{f: f, rc: rc, mtu: mtu, opened: make(chan struct{})}, nil
}

// open lets the reader start reading.
func (l *tunLink) open() { l.openOnce.Do(func() { close(l.opened) }) }

func (l *tunLink) MTU() uint32 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.mtu
}

func (l *tunLink) SetMTU(mtu uint32) {
	l.mu.Lock()
	l.mtu = mtu
	l.mu.Unlock()
}

func (*tunLink) MaxHeaderLength() uint16                 { return 0 }
func (*tunLink) LinkAddress() tcpip.LinkAddress          { return "" }
func (*tunLink) SetLinkAddress(tcpip.LinkAddress)        {}
func (*tunLink) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareNone }
func (*tunLink) AddHeader(*stack.PacketBuffer)           {}
func (*tunLink) ParseHeader(*stack.PacketBuffer) bool    { return true }
func (*tunLink) SetOnCloseAction(func())                 {}

// Capabilities: checksums are offloaded both ways. The packets come
// from the sandbox's kernel, which is trusted for them (and leaves TCP
// and UDP ones partial); the stack's own TCP and UDP packets leave with
// only the pseudo-header's sum, which the virtio-net header tells the
// sandbox's kernel to take as valid (vnetHeader).
func (*tunLink) Capabilities() stack.LinkEndpointCapabilities {
	return stack.CapabilityRXChecksumOffload | stack.CapabilityTXChecksumOffload
}

// Attach starts delivering packets to d; nil (the NIC's removal) stops
// the reader for good.
func (l *tunLink) Attach(d stack.NetworkDispatcher) {
	if d == nil {
		l.Close()
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || l.dispatcher != nil {
		return
	}
	l.dispatcher = d
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		<-l.opened
		l.readLoop(d)
	}()
}

func (l *tunLink) IsAttached() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.dispatcher != nil
}

// Wait waits for the reader to end (after Close or Attach(nil)).
func (l *tunLink) Wait() { l.wg.Wait() }

// Close closes the device's descriptor, which ends the reader.
func (l *tunLink) Close() {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.stopped = true
	l.dispatcher = nil
	l.mu.Unlock()
	l.f.Close()
	l.open() // a reader still waiting to start reads the closed descriptor and ends
}

func (l *tunLink) readLoop(d stack.NetworkDispatcher) {
	var small, large *buffer.View
	var vnet [tundev.VnetHdrLen]byte
	defer func() {
		if small != nil {
			small.Release()
		}
		if large != nil {
			large.Release()
		}
	}()
	for {
		if small == nil {
			small = buffer.NewViewSize(smallView)
		}
		if large == nil {
			large = buffer.NewViewSize(largeView)
		}
		iov := [][]byte{vnet[:], small.AsSlice(), large.AsSlice()}
		var n int
		var rerr error
		err := l.rc.Read(func(fd uintptr) bool {
			n, rerr = rawReadv(int(fd), iov)
			return rerr != unix.EAGAIN
		})
		if err != nil {
			return // closed
		}
		if rerr != nil {
			if rerr == unix.EINTR {
				continue
			}
			if errors.Is(rerr, unix.EBADF) || errors.Is(rerr, unix.EBADFD) {
				return // the device went away
			}
			continue
		}
		// No segmentation offload is turned on, so every packet is whole
		// (gso_type is VIRTIO_NET_HDR_GSO_NONE).
		if n -= tundev.VnetHdrLen; n < 1 || vnet[1] != 0 {
			continue
		}
		var proto tcpip.NetworkProtocolNumber
		switch small.AsSlice()[0] >> 4 {
		case 4:
			proto = header.IPv4ProtocolNumber
		case 6:
			proto = header.IPv6ProtocolNumber
		default:
			continue // not IP: read the next packet into the same views
		}
		var payload buffer.Buffer
		if n <= smallView {
			small.CapLength(n)
			payload = buffer.MakeWithView(small)
			small = nil
		} else {
			large.CapLength(n - smallView)
			payload = buffer.MakeWithView(small)
			payload.Append(large)
			small, large = nil, nil
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: payload})
		pkt.NetworkProtocolNumber = proto
		d.DeliverNetworkPacket(proto, pkt)
		pkt.DecRef()
	}
}

// WritePackets writes each packet to the device with one writev.
func (l *tunLink) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	sent := 0
	var vnet [tundev.VnetHdrLen]byte
	parts := make([][]byte, 0, 8)
	for _, pkt := range pkts.AsSlice() {
		vnetHeader(&vnet, pkt)
		parts = append(append(parts[:0], vnet[:]), pkt.AsSlices()...)
		if err := l.write(parts); err != nil {
			if sent == 0 {
				return 0, &tcpip.ErrClosedForSend{}
			}
			return sent, nil
		}
		sent++
	}
	return sent, nil
}

// write writes one packet given as consecutive slices.
func (l *tunLink) write(parts [][]byte) error {
	var werr error
	err := l.rc.Write(func(fd uintptr) bool {
		for {
			_, werr = rawWritev(int(fd), parts)
			if werr != unix.EINTR {
				break
			}
		}
		return werr != unix.EAGAIN
	})
	if err != nil {
		return err
	}
	return werr
}

// vnetHeader fills h for pkt. The stack leaves TCP and UDP checksums to
// the device (CapabilityTXChecksumOffload); this puts the pseudo-header's
// sum in the checksum field and marks the packet partial (as a kernel
// does for a device with checksum offload), which the sandbox's kernel
// takes as verified. Every other packet (ICMP, which the stack sums
// itself) gets an empty header.
func vnetHeader(h *[tundev.VnetHdrLen]byte, pkt *stack.PacketBuffer) {
	*h = [tundev.VnetHdrLen]byte{}
	var field int
	switch pkt.TransportProtocolNumber {
	case header.TCPProtocolNumber:
		field = header.TCPChecksumOffset
	case header.UDPProtocolNumber:
		field = udpChecksumOffset
	default:
		return
	}
	nh := pkt.NetworkHeader().Slice()
	th := pkt.TransportHeader().Slice()
	if len(th) < field+2 {
		return
	}
	var src, dst tcpip.Address
	switch pkt.NetworkProtocolNumber {
	case header.IPv4ProtocolNumber:
		ip := header.IPv4(nh)
		if len(nh) < header.IPv4MinimumSize || ip.More() || ip.FragmentOffset() != 0 {
			return // a fragment cannot be summed here; the stack never sends one (udpMaxDatagram)
		}
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	case header.IPv6ProtocolNumber:
		if len(nh) != header.IPv6MinimumSize {
			return // extension headers (a fragment's among them): not offloaded
		}
		ip := header.IPv6(nh)
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	default:
		return
	}
	length := pkt.Size() - len(nh)
	sum := header.PseudoHeaderChecksum(pkt.TransportProtocolNumber, src, dst, uint16(length))
	binary.BigEndian.PutUint16(th[field:], sum)
	h[0] = tundev.VnetNeedsCsum
	binary.NativeEndian.PutUint16(h[6:], uint16(len(nh)))
	binary.NativeEndian.PutUint16(h[8:], uint16(field))
}

// udpChecksumOffset is where a UDP header's checksum is.
const udpChecksumOffset = 6

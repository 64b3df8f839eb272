// Package netstack is the user-space TCP/IP stack that serves a sandbox's
// network: the other end of the sandbox's TUN device (package tundev),
// terminating every TCP connection and UDP flow the sandbox starts and
// handing each to a Handler (the policy engine, internal/netpolicy) to
// refuse or serve, answering DNS on the layout's resolver addresses
// through the same Handler, and publishing sandbox ports on the host.
//
// # Why gVisor's tcpip directly
//
// The stack is gVisor's netstack (gvisor.dev/gvisor/pkg/tcpip), used
// directly rather than through github.com/containers/gvisor-tap-vsock.
// What this package needs from a stack is small: one link endpoint on a
// TUN descriptor (IP packets, no Ethernet), a NIC that accepts every
// destination (promiscuous) and answers from any source address
// (spoofing), TCP and UDP forwarders that stop each new flow until a
// policy hook has decided, and a way to dial into the sandbox for
// published ports. gvisor-tap-vsock is built around a virtual Ethernet
// switch for virtual machines: a DHCP server, ARP, a gateway with its own
// DNS and port-forwarding configuration, its own transports (vsock, qemu,
// unix sockets) and its own forwarders that dial out before asking
// anyone. None of that is used here, its forwarders would have to be
// replaced to put the policy in front of the dial, and its extra hop
// through an Ethernet switch costs throughput and latency per packet.
// Using tcpip directly keeps the policy hook at the SYN, lets this
// package tune TCP (SACK, CUBIC, receive-buffer moderation, large buffer
// ranges) and keeps the dependency to the packages actually used.
//
// # The link
//
// The stack reads and writes the TUN descriptor through a link endpoint
// of its own (tunlink_linux.go) rather than gVisor's fdbased: the
// descriptor sits in the Go runtime's poller, each packet is delivered to
// the stack by the goroutine that read it, and closing the descriptor is
// what stops the reader (fdbased leaves an eventfd open per endpoint).
// Its reads and writes, like those of the host connections DialHost
// makes, are raw system calls: on a non-blocking descriptor they return
// at once, and a call the runtime is not told about never has the
// helper's one P handed to another thread while the kernel works in it.
// The device's MTU (65520 by default) lets one read or write carry up to
// 64 KiB, which is what GSO/GRO would otherwise buy; gVisor's fdbased
// offers host GSO only on sockets, not on TUN descriptors. Inbound
// checksums are not verified again: the sandbox's kernel computed them.
//
// # Flows
//
//   - TCP: every SYN from the sandbox becomes a TCPRequest given to
//     Handler.TCP on a goroutine of its own; Reject answers with a RST
//     (the client sees "connection refused" at once), Accept completes the
//     handshake and returns the sandbox's end as a net.Conn. A request the
//     Handler has not answered when Handler.TCP returns is rejected. The
//     request also has a Context() method (cancelled when the stack
//     closes) for a Handler that dials out before it answers.
//   - DNS: datagrams to the resolver addresses (port 53) and TCP
//     connections to them (port 53, length-prefixed messages) go to
//     Handler.DNS, one call per message.
//   - Other UDP: the first datagram of each flow (source and destination
//     address and port) calls Handler.UDP; datagrams are then relayed
//     both ways through the returned connection until the flow has been
//     idle for Config.UDPIdleTimeout. A refused flow gets an ICMP port
//     unreachable (ECONNREFUSED on a connected socket).
//   - Published ports: Publish listens on the host and dials each
//     connection into the sandbox through the stack.
//
// Close stops all of it and waits for every goroutine the stack started,
// including the Handler calls in progress (their contexts are cancelled).
package netstack

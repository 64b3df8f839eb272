package netstack

import (
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/agentkernel/agentkernel/internal/netstack/tundev"
)

// ErrUnsupported is returned by New where the stack cannot run (systems
// other than Linux).
var ErrUnsupported = errors.New("the user-space network stack is only supported on Linux")

// ErrClosed is returned by the Stack's methods once it is closed.
var ErrClosed = errors.New("network stack closed")

// Config is what New needs.
type Config struct {
	// TUN is the sandbox's TUN device (tundev.Open). The stack owns it
	// from New on and closes it on Close (or when New fails).
	TUN *os.File
	// Layout is the addressing the device was configured with
	// (tundev.Configure); the zero value means tundev.DefaultLayout().
	Layout tundev.Layout
	// Handler decides and serves the sandbox's flows. Required.
	Handler Handler
	// UDPIdleTimeout ends a relayed UDP flow after this long without a
	// datagram either way; zero means 60 seconds.
	UDPIdleTimeout time.Duration
	// MaxUDPFlows caps the UDP flows relayed at once; further flows are
	// refused. Zero means 1024.
	MaxUDPFlows int
	// MaxPendingTCP caps the connection attempts waiting for the
	// Handler's answer; further SYNs are dropped (the client retries).
	// Zero means 1024.
	MaxPendingTCP int
	// MaxTCPConns caps the sandbox's TCP connections through the stack
	// at once (waiting for the Handler's answer, or accepted and not yet
	// closed by the Handler); a SYN beyond it is answered with a RST
	// without asking the Handler. Zero means 4096.
	MaxTCPConns int
	// Logger gets the stack's own failures; nil discards them.
	Logger *slog.Logger
	// Held: the stack reads nothing from the device until Start, so that
	// its owner can finish what needs privileges (publishing a low port)
	// and drop them before the first packet from the sandbox is parsed.
	// Packets sent meanwhile wait in the device.
	Held bool
}

// Metrics are the stack's counters since New.
type Metrics struct {
	// TCPAccepted and TCPRejected count connection attempts by answer.
	TCPAccepted, TCPRejected uint64
	// UDPFlows counts relayed UDP flows, UDPRefused refused ones.
	UDPFlows, UDPRefused uint64
	// DNSQueries counts DNS messages given to Handler.DNS (UDP and TCP),
	// DNSFailed those for which it returned an error.
	DNSQueries, DNSFailed uint64
	// RxBytes and RxPackets are what the sandbox sent through its
	// device; TxBytes and TxPackets what the stack sent to it.
	RxBytes, RxPackets, TxBytes, TxPackets uint64
	// Published counts connections accepted on published ports.
	Published uint64
}

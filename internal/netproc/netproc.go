// Package netproc runs a sandbox's user-space network stack in a process
// of its own, and is how the process that owns a sandbox (a run, the
// supervisor of a persistent sandbox, the daemon's pool) talks to it.
//
// The stack (package netstack) parses every packet the sandbox sends, so
// it runs where a flaw in it reaches the least: in a helper process
// (agentkernel-full started as Argv0) that holds the sandbox's TUN device
// and its published ports' listeners, drops every capability before it
// reads a packet, and can take down nothing but that one sandbox's
// network. It also keeps gVisor's network stack out of the agentkernel
// binary, whose start-up every run pays, and out of a run without
// network.
//
// The helper gets the TUN device (or, in proxy mode, a socket listening
// inside the sandbox) as descriptor 3 and a SOCK_SEQPACKET
// socket as descriptor 4. On the socket, the owner sends one Config; the
// helper answers with one message saying it is ready (or why not),
// then sends a message for each refused connection or name as it happens
// (Denial), and a final Report once the owner asks it to stop or closes
// its end. The helper ends when the owner's end closes, so it never
// outlives the process that owns the sandbox.
package netproc

import (
	"os"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Argv0 is the helper's argv[0]: agentkernel-full started under this name
// runs Main of package netproc/helper and nothing else.
const Argv0 = "agentkernel-netstack"

// Mode is what the helper's descriptor 3 is.
type Mode string

const (
	// ModeTUN: the sandbox's TUN device, served by the user-space stack.
	ModeTUN Mode = "tun"
	// ModeProxy: a socket listening in the sandbox's network namespace,
	// served as an HTTP proxy (where the sandbox could not open a TUN
	// device: /dev/net/tun missing, as in a container without the
	// device, or not open to a rootless caller). Published ports are
	// forwarded through connections the owner makes inside the
	// sandbox's namespace (Config.Dial).
	ModeProxy Mode = "proxy"
)

// Config is what the helper needs to serve one sandbox.
type Config struct {
	// SandboxID names the sandbox in the helper's diagnostics.
	SandboxID string `json:"sandbox_id"`
	// Mode is what the helper's descriptor 3 is.
	Mode Mode `json:"mode"`
	// Network is the sandbox's resolved network policy, published ports
	// included.
	Network sandbox.Network `json:"network"`
	// Inject, when set, makes the helper add secrets to the requests for
	// their hosts. It holds the secrets' values and the CA's private key:
	// it travels on the helper's socket only, never to a file.
	Inject *Inject `json:"inject,omitempty"`
	// Dial, on the owner's side only, connects to a port of the sandbox
	// from inside its network namespace and returns the connected
	// socket: what a published port's connection is forwarded to in
	// proxy mode, where no stack reaches into the sandbox. The helper
	// asks for it by port (Message.Dial) and the owner dials only the
	// sandbox ports Network.Ports publishes.
	Dial func(port uint16) (*os.File, error) `json:"-"`
}

// Inject is a sandbox's secret injection (sandbox.Secrets on the wire).
type Inject struct {
	// CACert and CAKey are the sandbox's CA (PEM certificate, PEM PKCS #8
	// key) its bound hosts' certificates are minted from.
	CACert []byte `json:"ca_cert"`
	CAKey  []byte `json:"ca_key"`
	// Secrets are the bindings with their values.
	Secrets []Secret `json:"secrets"`
}

// Secret is one binding with its value.
type Secret struct {
	Key    string `json:"key"`
	Host   string `json:"host"`
	Header string `json:"header,omitempty"`
	Value  []byte `json:"value"`
}

// InjectConfig is what the helper needs of s, nil without bindings.
func InjectConfig(s *sandbox.Secrets) *Inject {
	if s == nil || len(s.Bindings) == 0 {
		return nil
	}
	in := &Inject{CACert: s.CACert, CAKey: s.CAKey}
	for _, b := range s.Bindings {
		in.Secrets = append(in.Secrets, Secret{Key: b.Key, Host: b.Host, Header: b.Header, Value: b.Value})
	}
	return in
}

// Injection counts the requests a secret was added to for a host.
type Injection = sandbox.SecretInjection

// Denial is a connection or name the policy refused.
type Denial = sandbox.NetworkDenial

// Report is what the helper says when it stops.
type Report struct {
	// Denials are the refusals, deduplicated.
	Denials []Denial `json:"denials,omitempty"`
	// Summary is one line naming what was refused and the flags that
	// would allow it; "" when nothing was.
	Summary string `json:"summary,omitempty"`
	// Counters are the stack's and policy's counters by name (flows
	// allowed and refused by kind, DNS queries, bytes).
	Counters map[string]uint64 `json:"counters,omitempty"`
	// Injections are the secrets added to requests, by secret and host.
	Injections []Injection `json:"injections,omitempty"`
}

// The helper's descriptors (Start passes them in this order), and the
// largest message on its socket.
const (
	DeviceFD   = 3 // the TUN device, or the proxy's listening socket
	SocketFD   = 4 // the SEQPACKET socket to the owner
	MaxMessage = 1 << 20
)

// Message is one message on the helper's socket, in either direction
// (one JSON object per datagram): the owner's side is Proc, the helper's
// package netproc/helper.
type Message struct {
	// Owner to helper.
	Config *Config `json:"config,omitempty"`
	Stop   bool    `json:"stop,omitempty"`
	// Helper to owner.
	Ready  bool    `json:"ready,omitempty"`
	Error  string  `json:"error,omitempty"`
	Deny   *Denial `json:"deny,omitempty"`
	Report *Report `json:"report,omitempty"`
	// Dial asks the owner for a connection to a published port (proxy
	// mode); Dialed is the answer, the connected socket as the message's
	// one SCM_RIGHTS descriptor unless Dialed.Error says why not.
	Dial   *DialRequest `json:"dial,omitempty"`
	Dialed *DialReply   `json:"dialed,omitempty"`
}

// DialRequest asks for a connection to the sandbox's Port; Seq pairs it
// with its DialReply.
type DialRequest struct {
	Seq  uint64 `json:"seq"`
	Port uint16 `json:"port"`
}

// DialReply answers the DialRequest of the same Seq.
type DialReply struct {
	Seq   uint64 `json:"seq"`
	Error string `json:"error,omitempty"`
}

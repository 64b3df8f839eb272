package netstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// errAnswered is returned by Accept after the request was answered.
var errAnswered = errors.New("netstack: connection request already answered")

// tcpRequest is a SYN from the sandbox held until the Handler answers.
type tcpRequest struct {
	st   *Stack
	r    *tcp.ForwarderRequest
	flow Flow

	mu       sync.Mutex
	answered bool
}

func flowOf(proto string, id stack.TransportEndpointID) Flow {
	return Flow{
		Proto: proto,
		Src:   netip.AddrPortFrom(netAddr(id.RemoteAddress), id.RemotePort),
		Dst:   netip.AddrPortFrom(netAddr(id.LocalAddress), id.LocalPort),
	}
}

func (q *tcpRequest) Flow() Flow { return q.flow }

// Context is cancelled when the stack closes: a Handler that dials out
// before it answers can bound its dial with it.
func (q *tcpRequest) Context() context.Context { return q.st.ctx }

func (q *tcpRequest) answer() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.answered {
		return false
	}
	q.answered = true
	return true
}

func (q *tcpRequest) Reject() {
	if !q.answer() {
		return
	}
	q.st.tcpRejected.Add(1)
	q.r.Complete(true)
	q.st.releaseTCPSlot()
}

func (q *tcpRequest) Accept() (net.Conn, error) {
	if !q.answer() {
		return nil, errAnswered
	}
	var wq waiter.Queue
	ep, e := q.r.CreateEndpoint(&wq)
	q.r.Complete(false)
	if e != nil {
		q.st.releaseTCPSlot()
		return nil, fmt.Errorf("netstack: completing the handshake with %s: %v", q.flow.Src, e)
	}
	q.st.tcpAccepted.Add(1)
	ep.SocketOptions().SetKeepAlive(true)
	// The request's place (Config.MaxTCPConns) is the connection's now.
	return &tcpConn{TCPConn: gonet.NewTCPConn(&wq, ep), st: q.st}, nil
}

// tcpConn is an accepted connection; its Close gives its place back
// (Config.MaxTCPConns).
type tcpConn struct {
	*gonet.TCPConn
	st   *Stack
	once sync.Once
}

func (c *tcpConn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(c.st.releaseTCPSlot)
	return err
}

func (st *Stack) releaseTCPSlot() {
	st.mu.Lock()
	st.tcpConns--
	st.mu.Unlock()
}

// handleTCP runs on the goroutine the forwarder starts for each SYN.
func (st *Stack) handleTCP(r *tcp.ForwarderRequest) {
	GrowStack()
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		r.Complete(true)
		return
	}
	if st.tcpConns >= st.cfg.MaxTCPConns {
		st.mu.Unlock()
		st.tcpRejected.Add(1)
		r.Complete(true)
		return
	}
	st.tcpConns++ // given back by Reject, a failed Accept or the connection's Close
	st.wg.Add(1)
	st.mu.Unlock()
	defer st.wg.Done()

	q := &tcpRequest{st: st, r: r, flow: flowOf("tcp", r.ID())}
	defer q.Reject() // a request left unanswered is refused
	st.cfg.Handler.TCP(q)
}

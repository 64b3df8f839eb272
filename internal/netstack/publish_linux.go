package netstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// publishDialTimeout bounds the connection into the sandbox for one
// connection to a published port.
const publishDialTimeout = 10 * time.Second

// Publish listens on the host at m.HostIP (127.0.0.1 when empty) and
// m.HostPort and connects each connection accepted there to the
// sandbox's m.SandboxPort through the stack (from the gateway address),
// copying both ways. Only TCP is published. Closing the returned Closer
// stops listening and ends the port's connections; Close of the stack
// does too.
func (st *Stack) Publish(m sandbox.PortMapping) (io.Closer, error) {
	ln, err := ListenPublished(m)
	if err != nil {
		return nil, err
	}
	p := &publication{ln: ln, conns: make(map[net.Conn]struct{})}
	if !st.track(p) {
		return nil, ErrClosed
	}
	if !st.goTracked(func() { st.servePublished(p, m.SandboxPort) }) {
		p.Close()
		return nil, ErrClosed
	}
	return p, nil
}

func (st *Stack) servePublished(p *publication, port uint16) {
	defer st.untrack(p)
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.isClosed() {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// EMFILE and the like: wait a little rather than spin.
			select {
			case <-st.ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if !p.add(c) {
			c.Close()
			return
		}
		if !st.goTracked(func() {
			defer p.remove(c)
			ctx, cancel := context.WithTimeout(st.ctx, publishDialTimeout)
			sb, err := st.dialSandbox(ctx, port, false)
			cancel()
			if err != nil {
				c.Close()
				return
			}
			if !p.add(sb) {
				sb.Close()
				c.Close()
				return
			}
			defer p.remove(sb)
			st.published.Add(1)
			Splice(c, sb)
		}) {
			p.remove(c)
			c.Close()
			return
		}
	}
}

// publication is one published port: its listener and its connections.
type publication struct {
	ln     net.Listener
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

func (p *publication) add(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *publication) remove(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *publication) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Close stops listening and ends the port's connections.
func (p *publication) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	err := p.ln.Close()
	for c := range conns {
		c.Close()
	}
	return err
}

// ListenPublished checks m and listens for it on the host: at m.HostIP
// (127.0.0.1 when empty) and m.HostPort, TCP only, with errors that name
// the mapping (a port in use, an address not of this host). Publish and
// proxy mode's publishing (netproc's helper) both listen through it.
func ListenPublished(m sandbox.PortMapping) (net.Listener, error) {
	if m.Proto != "" && m.Proto != "tcp" {
		return nil, fmt.Errorf("publishing %s: only TCP ports can be published", m)
	}
	if m.HostPort == 0 || m.SandboxPort == 0 {
		return nil, fmt.Errorf("publishing %s: ports must be 1 to 65535", m)
	}
	host := m.HostIP
	if host == "" {
		host = "127.0.0.1"
	}
	addr := net.JoinHostPort(host, strconv.Itoa(int(m.HostPort)))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("publishing %s: host port %s is already in use", m, addr)
		}
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			return nil, fmt.Errorf("publishing %s: %s is not an address of this host", m, host)
		}
		return nil, fmt.Errorf("publishing %s: %w", m, err)
	}
	return ln, nil
}

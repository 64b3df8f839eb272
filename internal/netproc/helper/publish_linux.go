package helper

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/netproc"
	"github.com/agentkernel/agentkernel/internal/netstack"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// dialWait bounds the owner's answer to a request for a connection into
// the sandbox.
const dialWait = 15 * time.Second

// ownerDialer asks the sandbox's owner for connections into the sandbox
// (proxy mode: the helper has no way into the sandbox's namespace of its
// own) and takes its answers, which come on the owner's socket among its
// other messages (deliver).
type ownerDialer struct {
	send func(netproc.Message)
	gone chan struct{} // closed when the owner's socket is no longer read

	mu      sync.Mutex
	seq     uint64
	pending map[uint64]chan dialAnswer
}

type dialAnswer struct {
	f   *os.File
	err error
}

func newOwnerDialer(send func(netproc.Message)) *ownerDialer {
	return &ownerDialer{send: send, gone: make(chan struct{}), pending: map[uint64]chan dialAnswer{}}
}

// close fails the dials waiting for an answer and those to come.
func (d *ownerDialer) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.gone:
	default:
		close(d.gone)
	}
}

// dial returns a connection to the sandbox's port, made by the owner
// inside the sandbox's network namespace.
func (d *ownerDialer) dial(port uint16) (net.Conn, error) {
	ch := make(chan dialAnswer, 1)
	d.mu.Lock()
	select {
	case <-d.gone:
		d.mu.Unlock()
		return nil, errors.New("the sandbox's owner is gone")
	default:
	}
	d.seq++
	seq := d.seq
	d.pending[seq] = ch
	d.mu.Unlock()
	d.send(netproc.Message{Dial: &netproc.DialRequest{Seq: seq, Port: port}})
	t := time.NewTimer(dialWait)
	defer t.Stop()
	select {
	case a := <-ch:
		if a.err != nil {
			return nil, a.err
		}
		c, err := net.FileConn(a.f)
		a.f.Close()
		return c, err
	case <-t.C:
	case <-d.gone:
	}
	d.mu.Lock()
	delete(d.pending, seq)
	d.mu.Unlock()
	select {
	case a := <-ch: // answered meanwhile
		if a.f != nil {
			a.f.Close()
		}
	default:
	}
	return nil, errors.New("no answer from the sandbox's owner")
}

// deliver hands the owner's answer r (with the descriptors that came
// with it) to the dial waiting for it; descriptors nobody takes are
// closed.
func (d *ownerDialer) deliver(r netproc.DialReply, fds []int) {
	d.mu.Lock()
	ch := d.pending[r.Seq]
	delete(d.pending, r.Seq)
	d.mu.Unlock()
	var a dialAnswer
	switch {
	case ch == nil:
	case r.Error != "":
		a.err = errors.New(r.Error)
	case len(fds) != 1:
		a.err = errors.New("the owner's answer carried no connection")
	default:
		a.f = os.NewFile(uintptr(fds[0]), "published")
		fds = fds[1:]
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	if ch != nil {
		ch <- a
	}
}

// readOwner reads one message from the owner's socket, with the
// descriptors that came with it (close-on-exec).
func readOwner(sock int, buf, oob []byte) (netproc.Message, []int, error) {
	n, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
	for err == unix.EINTR {
		n, oobn, _, _, err = unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
	}
	if err != nil {
		return netproc.Message{}, nil, err
	}
	if n == 0 {
		return netproc.Message{}, nil, errors.New("closed")
	}
	var fds []int
	if oobn > 0 {
		if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for i := range msgs {
				if f, perr := unix.ParseUnixRights(&msgs[i]); perr == nil {
					fds = append(fds, f...)
				}
			}
		}
	}
	var m netproc.Message
	if json.Unmarshal(buf[:n], &m) != nil {
		m = netproc.Message{}
	}
	return m, fds, nil
}

// proxyPublication is a published port in proxy mode: a listener on the
// host whose connections are spliced to connections the owner makes to
// the port inside the sandbox.
type proxyPublication struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	done bool
	open map[net.Conn]struct{}
}

// publishProxied listens on the host for m (127.0.0.1 unless m names an
// address), as netstack's Publish does for a sandbox with a stack.
func publishProxied(m sandbox.PortMapping) (*proxyPublication, error) {
	ln, err := netstack.ListenPublished(m)
	if err != nil {
		return nil, err
	}
	return &proxyPublication{ln: ln, open: map[net.Conn]struct{}{}}, nil
}

// serve accepts until Close, each connection spliced to one dial makes
// to port.
func (p *proxyPublication) serve(port uint16, dial func(uint16) (net.Conn, error), onPublished func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := p.ln.Accept()
			if err != nil {
				if p.closed() {
					return
				}
				time.Sleep(50 * time.Millisecond) // EMFILE and the like
				continue
			}
			if !p.track(c) {
				c.Close()
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer p.untrack(c)
				sb, err := dial(port)
				if err != nil {
					c.Close()
					return
				}
				if !p.track(sb) {
					sb.Close()
					c.Close()
					return
				}
				defer p.untrack(sb)
				onPublished()
				netstack.Splice(c, sb)
			}()
		}
	}()
}

func (p *proxyPublication) closed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

func (p *proxyPublication) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return false
	}
	p.open[c] = struct{}{}
	return true
}

func (p *proxyPublication) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.open, c)
	p.mu.Unlock()
}

// Close stops listening, ends the port's connections and waits for its
// goroutines.
func (p *proxyPublication) Close() error {
	p.mu.Lock()
	p.done = true
	open := p.open
	p.open = map[net.Conn]struct{}{}
	p.mu.Unlock()
	err := p.ln.Close()
	for c := range open {
		c.Close()
	}
	p.wg.Wait()
	return err
}

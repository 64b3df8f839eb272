package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// MaxMessage is the largest message: requests and responses are small;
// bulk data travels through passed descriptors.
const MaxMessage = 256 << 10

// ErrMessageTooLarge is Send's error for a message over MaxMessage.
var ErrMessageTooLarge = errors.New("message too large")

// Conn is one end of a SOCK_SEQPACKET connection carrying JSON messages
// with optional descriptors. Send is safe for concurrent use; Recv must be
// called from one goroutine at a time.
//
// Every system call goes through the file's syscall.RawConn, never a
// saved descriptor number: the runtime then releases the number only once
// no call uses it, so a Close racing a Recv (the client's read loop) can
// never make that loop read from an unrelated descriptor that reused the
// number — in a process running many sandboxes at once (the API server)
// that stole other sandboxes' config messages and pipes.
type Conn struct {
	f  *os.File
	rc syscall.RawConn
	mu sync.Mutex

	// rbuf is Recv's buffer, kept for the connection's life: a fresh
	// MaxMessage buffer per message is garbage that a long-lived,
	// mostly idle process (supervisor, persistent init) keeps resident
	// until a GC that may never come. Memory of a new buffer is touched
	// only as far as messages reach.
	rmu  sync.Mutex
	rbuf []byte
}

// NewConn wraps a connected SOCK_SEQPACKET socket.
func NewConn(f *os.File) *Conn {
	rc, err := f.SyscallConn()
	if err != nil {
		panic("agent: NewConn: " + err.Error()) // only for a nil or closed file
	}
	return &Conn{f: f, rc: rc}
}

// Close closes the socket. A Recv blocked on it returns ErrClosed (or
// an error): the socket is shut down first, which wakes it.
func (c *Conn) Close() error {
	_ = c.rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RDWR) })
	return c.f.Close()
}

// File is the underlying socket.
func (c *Conn) File() *os.File { return c.f }

// Send sends v as one message with fds attached.
func (c *Conn) Send(v any, fds ...int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > MaxMessage {
		return fmt.Errorf("%w (%d bytes, %d at most)", ErrMessageTooLarge, len(b), MaxMessage)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	werr := c.rc.Write(func(fd uintptr) bool {
		for {
			err = unix.Sendmsg(int(fd), b, oob, nil, 0)
			if err != unix.EINTR {
				return err != unix.EAGAIN
			}
		}
	})
	if err == nil {
		err = werr
	}
	return err
}

// ErrClosed is returned by Recv when the peer closed the connection.
var ErrClosed = errors.New("connection closed")

// Recv reads one message into v and returns the descriptors attached to
// it (close-on-exec; the caller owns them).
func (c *Conn) Recv(v any) ([]int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.rbuf == nil {
		c.rbuf = make([]byte, MaxMessage)
	}
	buf := c.rbuf
	var oobBuf [64]byte // room for CmsgSpace(4*8)
	oob := oobBuf[:unix.CmsgSpace(4*8)]
	var n, oobn int
	var err error
	rerr := c.rc.Read(func(fd uintptr) bool {
		for {
			n, oobn, _, _, err = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
			if err != unix.EINTR {
				return err != unix.EAGAIN
			}
		}
	})
	if err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return nil, err
	}
	var fds []int
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr == nil {
			for i := range msgs {
				if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
					fds = append(fds, f...)
				}
			}
		}
	}
	if n == 0 {
		CloseFds(fds)
		return nil, ErrClosed
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		CloseFds(fds)
		return nil, fmt.Errorf("bad message: %w", err)
	}
	return fds, nil
}

// CloseFds closes every descriptor in fds.
func CloseFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

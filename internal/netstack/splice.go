package netstack

import (
	"errors"
	"io"
	"net"
	"sync"
)

// CopyBufSize is the buffer of each direction of a copy: large enough
// that one read from the stack or the host takes a large part of a fast
// stream's receive window.
const CopyBufSize = 128 << 10

var copyBufs = sync.Pool{New: func() any { b := make([]byte, CopyBufSize); return &b }}

type closeWriter interface{ CloseWrite() error }

// errNoHalfClose is Copy's answer for a destination that cannot pass an
// end of stream on by itself.
var errNoHalfClose = errors.New("netstack: the connection cannot be half-closed")

// Splice copies a to b and b to a until both directions have ended,
// passing a half-close (EOF) from one side on to the other, then closes
// both connections. It returns the bytes copied each way and the first
// error other than a normal end.
func Splice(a, b net.Conn) (aToB, bToA int64, err error) {
	var wg sync.WaitGroup
	var errAB, errBA error
	wg.Add(1)
	go func() {
		GrowStack()
		defer wg.Done()
		bToA, errBA = copyHalf(a, b)
	}()
	aToB, errAB = copyHalf(b, a)
	wg.Wait()
	a.Close()
	b.Close()
	if errAB != nil {
		return aToB, bToA, errAB
	}
	return aToB, bToA, errBA
}

// Copy copies src to dst through buf until src ends, then passes the end
// of stream on by half-closing dst. It returns the bytes copied and the
// first error other than src's end, a half-close that dst cannot do
// included, and closes nothing: the caller decides how a broken copy
// ends (Splice closes both sides, the policy engine resets them).
func Copy(dst, src net.Conn, buf []byte) (int64, error) {
	// Hide ReaderFrom/WriterTo: they would copy through their own small
	// buffers when the other side is not a kernel socket.
	n, err := io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf)
	if err != nil {
		return n, err
	}
	cw, ok := dst.(closeWriter)
	if !ok {
		return n, errNoHalfClose
	}
	return n, cw.CloseWrite()
}

// copyHalf copies src to dst and then half-closes dst (or closes both
// when dst cannot be half-closed, or when the copy failed, so that the
// other direction ends too).
func copyHalf(dst, src net.Conn) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	n, err := Copy(dst, src, *bp)
	copyBufs.Put(bp)
	if err == nil {
		return n, nil
	}
	dst.Close()
	src.Close()
	if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, errNoHalfClose) {
		err = nil
	}
	return n, err
}

package netstack

import (
	"errors"
	"io"
	"net"
	"sync"
)

// copyBufSize is the buffer of each direction of a splice: large enough
// that one read from the stack or the host takes a whole receive window's
// worth of a fast stream.
const copyBufSize = 256 << 10

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

type closeWriter interface{ CloseWrite() error }

// Splice copies a to b and b to a until both directions have ended,
// passing a half-close (EOF) from one side on to the other, then closes
// both connections. It returns the bytes copied each way and the first
// error other than a normal end.
func Splice(a, b net.Conn) (aToB, bToA int64, err error) {
	var wg sync.WaitGroup
	var errAB, errBA error
	wg.Add(1)
	go func() {
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

// copyHalf copies src to dst and then half-closes dst (or closes both
// when dst cannot be half-closed, or when the copy failed, so that the
// other direction ends too).
func copyHalf(dst, src net.Conn) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	// Hide ReaderFrom/WriterTo: they would copy through their own small
	// buffers when the other side is not a kernel socket.
	n, err := io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
	copyBufs.Put(bp)
	if err == nil {
		if cw, ok := dst.(closeWriter); ok && cw.CloseWrite() == nil {
			return n, nil
		}
	}
	dst.Close()
	src.Close()
	if err != nil && (errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF)) {
		err = nil
	}
	return n, err
}

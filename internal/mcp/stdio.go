package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// stdioConn is the stdin/stdout pair under the SDK's IOTransport. It does
// two things the SDK's stdio transport does not:
//
//   - It vets every line (vet, jsonrpc.go). The SDK ends the session at
//     the first line it cannot decode; here a line that is not JSON is
//     answered with a -32700 Parse error, valid JSON that is not a
//     JSON-RPC 2.0 message (a wrong "jsonrpc", a method that is not a
//     string, an id of the wrong type, a batch, a bare number) with
//     -32600 Invalid Request, a line longer than MaxMessageBytes with
//     -32600 without being buffered, and blank lines are skipped. The
//     SDK reads only the re-encoded messages that passed, one line each.
//   - It lets a client write its requests and close stdin at once
//     (`printf '...' | agentkernel mcp-server`): the SDK ends the session
//     at EOF, cancelling the tool calls in flight, so EOF is held back
//     until every request passed on has been answered on stdout (or ctx
//     ends). Requests and answers are paired by their ids.
type stdioConn struct {
	ctx context.Context
	in  *bufio.Reader
	// inCloser closes stdin.
	inCloser io.Closer
	out      io.WriteCloser

	// queue is what is left of the current vetted message for the SDK;
	// eof is the read error seen after the last line.
	queue []byte
	eof   error

	wmu    sync.Mutex // one message at a time on stdout; guards outBuf
	outBuf []byte     // a partial output line

	mu      sync.Mutex
	pending map[string]int // request id → count
	changed chan struct{}  // closed and replaced on every change
}

func newStdioConn(ctx context.Context, in io.ReadCloser, out io.WriteCloser) *stdioConn {
	return &stdioConn{ctx: ctx, in: bufio.NewReaderSize(in, 64<<10), inCloser: in, out: out,
		pending: map[string]int{}, changed: make(chan struct{})}
}

// Read hands the SDK the next vetted message; at EOF it waits until
// nothing is pending.
func (c *stdioConn) Read(p []byte) (int, error) {
	for len(c.queue) == 0 {
		if c.eof != nil {
			if errors.Is(c.eof, io.EOF) {
				c.drain()
			}
			return 0, c.eof
		}
		line, tooLong, err := c.readLine()
		if err != nil {
			c.eof = err
		}
		if tooLong {
			c.reply(errorResponse(nil, codeInvalidRequest, fmt.Sprintf("Invalid Request: the message is longer than %d bytes and was dropped", MaxMessageBytes)))
			continue
		}
		v := vet(line)
		switch {
		case v.reply != nil:
			c.reply(v.reply)
		case v.msg == nil: // blank
		case v.id != "" && c.isPending(v.id):
			// The SDK would answer with a null id; the request in
			// flight keeps its own.
			c.reply(errorResponse([]byte(v.id), codeInvalidRequest, "Invalid Request: a request with this id is still being answered"))
		default:
			if v.id != "" {
				c.track(v.id, +1)
			}
			c.queue = append(v.msg, '\n')
		}
	}
	n := copy(p, c.queue)
	c.queue = c.queue[n:]
	return n, nil
}

// readLine reads one line without its end (LF or CRLF). A line longer
// than MaxMessageBytes is read to its end without being kept: tooLong.
// err is the read error after the line (io.EOF for a last line without
// a newline).
func (c *stdioConn) readLine() (line []byte, tooLong bool, err error) {
	for {
		chunk, err := c.in.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > MaxMessageBytes+2 { // room for CRLF
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			return nil, true, err
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if len(line) > MaxMessageBytes {
			return nil, true, err
		}
		return line, false, err
	}
}

// drain waits until every request passed on has been answered, or ctx
// ends.
func (c *stdioConn) drain() {
	for {
		c.mu.Lock()
		left, ch := len(c.pending), c.changed
		c.mu.Unlock()
		if left == 0 {
			// An answer counts before its bytes are out (Write): wait
			// for the write in progress.
			c.wmu.Lock()
			c.wmu.Unlock()
			return
		}
		select {
		case <-ch:
		case <-c.ctx.Done():
			return
		}
	}
}

func (c *stdioConn) isPending(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending[id] > 0
}

// track counts a request passed on (+1) or answered (-1).
func (c *stdioConn) track(id string, delta int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.pending[id] + delta
	switch {
	case n > 0:
		c.pending[id] = n
	case c.pending[id] == 0:
		return // an answer to nothing we passed on
	default:
		delete(c.pending, id)
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// reply writes one message of ours (an error answer) to stdout.
func (c *stdioConn) reply(msg []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _ = c.out.Write(append(msg, '\n'))
}

// Write passes the SDK's messages to stdout and marks their requests
// answered, before the bytes go out: a client that has read an answer
// may send its id again at once, and must not find it still in flight.
// (drain waits for the write itself.)
func (c *stdioConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.outBuf = append(c.outBuf, p...)
	for {
		i := bytes.IndexByte(c.outBuf, '\n')
		if i < 0 {
			break
		}
		c.answered(c.outBuf[:i])
		c.outBuf = c.outBuf[i+1:]
	}
	if len(c.outBuf) == 0 {
		c.outBuf = nil
	}
	return c.out.Write(p)
}

// answered marks the request a response line of the SDK answers.
func (c *stdioConn) answered(line []byte) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method *string         `json:"method"`
	}
	if json.Unmarshal(line, &m) != nil || m.Method != nil || len(m.ID) == 0 {
		return
	}
	if id := idKey(m.ID); id != "" {
		c.track(id, -1)
	}
}

// Close closes stdin.
func (c *stdioConn) Close() error { return c.inCloser.Close() }

// stdioWriter is the stdout side of the transport.
type stdioWriter struct{ c *stdioConn }

func (w stdioWriter) Write(p []byte) (int, error) { return w.c.Write(p) }
func (w stdioWriter) Close() error                { return w.c.out.Close() }

// stdio returns the reader and writer for the SDK's IOTransport over in
// and out (the process's stdin and stdout).
func stdio(ctx context.Context, in io.ReadCloser, out io.WriteCloser) (io.ReadCloser, io.WriteCloser) {
	c := newStdioConn(ctx, in, out)
	return c, stdioWriter{c}
}

// osStdio is stdio over this process's stdin and stdout.
func osStdio(ctx context.Context) (io.ReadCloser, io.WriteCloser) {
	return stdio(ctx, os.Stdin, os.Stdout)
}

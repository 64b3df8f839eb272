package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"sync"
)

// drainingStdio lets a client write its requests and close stdin at
// once (`printf '...' | agentkernel mcp-server`): the SDK's stdio
// transport ends the session at EOF, cancelling the tool calls in
// flight. Here EOF on stdin is held back until every request read so far
// has been answered on stdout (or ctx ends). Requests and answers are
// matched by their JSON-RPC id, from the newline-delimited messages as
// they pass.
type drainingStdio struct {
	ctx context.Context
	in  io.ReadCloser
	out io.WriteCloser

	mu      sync.Mutex
	pending map[string]int // request id → count
	changed chan struct{}  // closed and replaced on every change
	inBuf   []byte         // a partial input line
	outBuf  []byte         // a partial output line
}

func newDrainingStdio(ctx context.Context, in io.ReadCloser, out io.WriteCloser) *drainingStdio {
	return &drainingStdio{ctx: ctx, in: in, out: out, pending: map[string]int{}, changed: make(chan struct{})}
}

// message is what is needed of a JSON-RPC message to pair requests and
// answers.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

// lines calls f for each complete line of buf+p and keeps the rest.
func lines(buf *[]byte, p []byte, f func([]byte)) {
	*buf = append(*buf, p...)
	for {
		i := bytes.IndexByte(*buf, '\n')
		if i < 0 {
			break
		}
		f((*buf)[:i])
		*buf = (*buf)[i+1:]
	}
	if len(*buf) == 0 {
		*buf = nil
	}
}

func (d *drainingStdio) note(line []byte, request bool) {
	var m message
	if json.Unmarshal(line, &m) != nil || len(m.ID) == 0 || string(m.ID) == "null" {
		return
	}
	id := string(m.ID)
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case request && m.Method != "":
		d.pending[id]++
	case !request && m.Method == "":
		if d.pending[id] > 1 {
			d.pending[id]--
		} else {
			delete(d.pending, id)
		}
	default:
		return
	}
	close(d.changed)
	d.changed = make(chan struct{})
}

// Read passes stdin through; at EOF it waits until nothing is pending.
func (d *drainingStdio) Read(p []byte) (int, error) {
	n, err := d.in.Read(p)
	if n > 0 {
		lines(&d.inBuf, p[:n], func(l []byte) { d.note(l, true) })
	}
	if err == io.EOF {
		if len(d.inBuf) > 0 {
			d.note(d.inBuf, true)
			d.inBuf = nil
		}
		for {
			d.mu.Lock()
			left, ch := len(d.pending), d.changed
			d.mu.Unlock()
			if left == 0 {
				break
			}
			select {
			case <-ch:
			case <-d.ctx.Done():
				return n, err
			}
		}
	}
	return n, err
}

// Write passes answers to stdout and marks their requests answered.
func (d *drainingStdio) Write(p []byte) (int, error) {
	n, err := d.out.Write(p)
	if n > 0 {
		lines(&d.outBuf, p[:n], func(l []byte) { d.note(l, false) })
	}
	return n, err
}

func (d *drainingStdio) Close() error { return d.in.Close() }

// writeCloser is the stdout side of the transport.
type writeCloser struct{ d *drainingStdio }

func (w writeCloser) Write(p []byte) (int, error) { return w.d.Write(p) }
func (w writeCloser) Close() error                { return w.d.out.Close() }

// stdio returns the reader and writer for the SDK's IOTransport over
// this process's stdin and stdout.
func stdio(ctx context.Context) (io.ReadCloser, io.WriteCloser) {
	d := newDrainingStdio(ctx, os.Stdin, os.Stdout)
	return d, writeCloser{d}
}

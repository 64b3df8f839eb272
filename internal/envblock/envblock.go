// Package envblock carries a command's environment on its stdin instead
// of its command line: a process's arguments are readable by every user
// of its machine (/proc/PID/cmdline), its stdin is not. A caller (the
// nomad backend, which runs `agentkernel exec --env-stdin` on a node
// through Nomad's exec API) writes one block before the command's own
// stdin; the node's agentkernel reads exactly that block, no byte more,
// and passes the rest on to the command.
//
// A block is the magic "AKENV1\x00" and a 4-byte big-endian length N,
// then N bytes: KEY=VALUE entries, each ended by a NUL. A key is not
// empty and holds no "="; a value may hold anything but NUL (newlines
// included). N is at most MaxSize.
//
// When the node's stdin is a terminal (exec -t), the bytes written to it
// before the node's agentkernel has made it raw would be echoed and
// edited by its line discipline: the reader then makes it raw first and
// writes Ready to its output, and the writer sends the block only once
// it has seen Ready (Filter).
package envblock

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Magic starts every block.
const Magic = "AKENV1\x00"

// MaxSize is the largest block's payload: 1 MiB, more than a Linux
// process's whole environment may hold (ARG_MAX is 2 MiB with the
// arguments, and one string is at most 128 KiB).
const MaxSize = 1 << 20

// Ready is what the reader writes to its terminal once it is raw, for a
// writer that must wait for it: an OSC sequence that terminals ignore
// should it ever reach one.
const Ready = "\x1b]5379;agentkernel-env-ready\x07"

// Encode is env as a block. Every entry must be KEY=VALUE with a key
// that is not empty, and none may hold a NUL.
func Encode(env []string) ([]byte, error) {
	size := 0
	for _, e := range env {
		if err := checkEntry(e); err != nil {
			return nil, err
		}
		size += len(e) + 1
	}
	if size > MaxSize {
		return nil, fmt.Errorf("environment of %d bytes: at most %d can be passed", size, MaxSize)
	}
	b := make([]byte, 0, len(Magic)+4+size)
	b = append(b, Magic...)
	b = binary.BigEndian.AppendUint32(b, uint32(size))
	for _, e := range env {
		b = append(append(b, e...), 0)
	}
	return b, nil
}

func checkEntry(e string) error {
	k, _, ok := strings.Cut(e, "=")
	switch {
	case strings.IndexByte(e, 0) >= 0:
		return fmt.Errorf("environment entry %q holds a NUL byte", strings.ReplaceAll(trimForError(e), "\x00", `\0`))
	case !ok || k == "":
		return fmt.Errorf("environment entry %q: KEY=VALUE is required", trimForError(e))
	}
	return nil
}

// trimForError is an entry's key alone when it has one: an error never
// repeats a value (it may be a secret).
func trimForError(e string) string {
	if k, _, ok := strings.Cut(e, "="); ok && k != "" {
		return k + "=…"
	}
	if len(e) > 64 {
		return e[:64] + "…"
	}
	return e
}

// Read reads one block from r and answers its entries, reading exactly
// the block: r's next byte is the first one after it (r is read with
// io.ReadFull, never more than asked; give it an unbuffered reader such
// as an *os.File). Anything that is not a well-formed block is refused.
func Read(r io.Reader) ([]string, error) {
	var head [len(Magic) + 4]byte
	if n, err := io.ReadFull(r, head[:]); err != nil {
		if n == 0 && errors.Is(err, io.EOF) {
			return nil, errors.New("no environment block: stdin is empty")
		}
		if !bytes.HasPrefix([]byte(Magic), head[:min(n, len(Magic))]) {
			return nil, errors.New("stdin does not start with an environment block")
		}
		return nil, fmt.Errorf("environment block cut short after %d bytes: %w", n, err)
	}
	if string(head[:len(Magic)]) != Magic {
		return nil, errors.New("stdin does not start with an environment block")
	}
	size := binary.BigEndian.Uint32(head[len(Magic):])
	if size > MaxSize {
		return nil, fmt.Errorf("environment block of %d bytes: at most %d are read", size, MaxSize)
	}
	payload := make([]byte, size)
	if n, err := io.ReadFull(r, payload); err != nil {
		return nil, fmt.Errorf("environment block cut short: %d of %d bytes: %w", n, size, err)
	}
	return Parse(payload)
}

// Parse is a block's payload (after its magic and length) as entries.
func Parse(payload []byte) ([]string, error) {
	if len(payload) == 0 {
		return nil, nil
	}
	if payload[len(payload)-1] != 0 {
		return nil, errors.New("environment block: its last entry is not ended by a NUL")
	}
	parts := strings.Split(string(payload[:len(payload)-1]), "\x00")
	env := make([]string, 0, len(parts))
	for i, e := range parts {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("environment block: entry %d is not KEY=VALUE", i+1)
		}
		env = append(env, e)
	}
	return env, nil
}

// Filter is the writer side's view of a terminal's output while it
// waits for Ready: Writer passes the output on without Ready, and Stdin
// gives the block, then stdin, once Ready has been seen. Close ends the
// wait (the command is over): Stdin's reads answer EOF from then on if
// Ready never came.
type Filter struct {
	w     io.Writer
	block []byte
	stdin io.Reader

	mu      sync.Mutex
	pending []byte
	seen    bool
	ready   chan struct{}
	done    chan struct{}
	once    sync.Once
}

// NewFilter is a Filter of w, sending block then stdin (nil: none)
// after Ready.
func NewFilter(w io.Writer, block []byte, stdin io.Reader) *Filter {
	return &Filter{w: w, block: block, stdin: stdin, ready: make(chan struct{}), done: make(chan struct{})}
}

// Writer is the output with Ready taken out.
func (f *Filter) Writer() io.Writer { return filterWriter{f} }

// Stdin is the block followed by stdin, read once Ready has come.
func (f *Filter) Stdin() io.Reader { return &gatedReader{f: f} }

// Close ends the wait for Ready, and writes what was held back of the
// output (the beginning of something that looked like Ready).
func (f *Filter) Close() {
	f.once.Do(func() { close(f.done) })
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.pending) > 0 {
		_, _ = f.w.Write(f.pending)
		f.pending = nil
	}
}

type filterWriter struct{ f *Filter }

func (fw filterWriter) Write(p []byte) (int, error) {
	f := fw.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen || isClosed(f.done) {
		_, err := f.w.Write(p)
		return len(p), err
	}
	f.pending = append(f.pending, p...)
	if i := bytes.Index(f.pending, []byte(Ready)); i >= 0 {
		f.seen = true
		close(f.ready)
		out := append(f.pending[:i:i], f.pending[i+len(Ready):]...)
		f.pending = nil
		if len(out) > 0 {
			if _, err := f.w.Write(out); err != nil {
				return len(p), err
			}
		}
		return len(p), nil
	}
	// Hold back the longest end of pending that may begin Ready.
	keep := 0
	for k := min(len(f.pending), len(Ready)-1); k > 0; k-- {
		if bytes.HasSuffix(f.pending, []byte(Ready[:k])) {
			keep = k
			break
		}
	}
	out := f.pending[:len(f.pending)-keep]
	if len(out) > 0 {
		if _, err := f.w.Write(out); err != nil {
			return len(p), err
		}
	}
	f.pending = append([]byte(nil), f.pending[len(f.pending)-keep:]...)
	return len(p), nil
}

type gatedReader struct {
	f    *Filter
	r    io.Reader
	open bool
}

func (g *gatedReader) Read(p []byte) (int, error) {
	if !g.open {
		select {
		case <-g.f.ready:
		case <-g.f.done:
			select {
			case <-g.f.ready:
			default:
				return 0, io.EOF
			}
		}
		g.open = true
		rs := []io.Reader{bytes.NewReader(g.f.block)}
		if g.f.stdin != nil {
			rs = append(rs, g.f.stdin)
		}
		g.r = io.MultiReader(rs...)
	}
	return g.r.Read(p)
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

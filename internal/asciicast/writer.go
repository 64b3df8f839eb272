// Package asciicast writes and reads terminal recordings in the
// asciicast v2 format (the format asciinema plays): a header line, a JSON
// object, then one event per line, a JSON array [time, type, data], time
// in seconds from the start with six decimals, type "o" (what the
// terminal printed), "i" (what was typed), "r" (a resize, "COLSxROWS")
// or "m" (a marker). Replay plays a recording back with its timing.
//
// The package has no platform code and no dependencies beyond the
// standard library.
package asciicast

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Version is the asciicast version this package writes and reads.
const Version = 2

// Event types.
const (
	Output = "o"
	Input  = "i"
	Resize = "r"
	Marker = "m"
)

// Header is a recording's first line. Optional keys that are zero are
// left out of the file.
type Header struct {
	Version int `json:"version"`
	Width   int `json:"width"`
	Height  int `json:"height"`
	// Timestamp is when the recording began, in Unix seconds.
	Timestamp int64 `json:"timestamp"`
	// Duration is the recording's length in seconds, when known.
	Duration float64 `json:"duration,omitempty"`
	// IdleTimeLimit caps the pauses of a replay, in seconds.
	IdleTimeLimit float64           `json:"idle_time_limit,omitempty"`
	Command       string            `json:"command,omitempty"`
	Title         string            `json:"title,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
}

// Event is one event line.
type Event struct {
	// Time is seconds since the start of the recording.
	Time float64
	// Type is Output, Input, Resize or Marker.
	Type string
	Data string
}

// Writer writes a recording: the header when made, then an event line
// for each Output, Input and Resize, each line one Write to the
// underlying writer. It is safe for concurrent use. A multi-byte UTF-8
// character cut between two writes of one stream is held until its
// last byte comes, so that every event carries whole characters; bytes
// that are not UTF-8 become U+FFFD. The first error writing sticks:
// later calls return it.
type Writer struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
	now   func() time.Time
	last  float64
	// pending holds the incomplete UTF-8 tail of each stream.
	pending map[string][]byte
	err     error
	closed  bool
}

// NewWriter writes h as the header of a recording to w and returns the
// Writer of its events, timed from now. h.Version is set to 2, a zero
// Timestamp to now; Width and Height must be positive.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	return newWriter(w, h, time.Now)
}

func newWriter(w io.Writer, h Header, now func() time.Time) (*Writer, error) {
	if h.Width <= 0 || h.Height <= 0 {
		return nil, fmt.Errorf("asciicast: terminal size %dx%d: width and height must be positive", h.Width, h.Height)
	}
	if h.Duration < 0 || h.IdleTimeLimit < 0 {
		return nil, errors.New("asciicast: negative duration or idle time limit")
	}
	start := now()
	h.Version = Version
	if h.Timestamp == 0 {
		h.Timestamp = start.Unix()
	}
	line, err := marshal(h)
	if err != nil {
		return nil, fmt.Errorf("asciicast: header: %w", err)
	}
	if _, err := w.Write(line); err != nil {
		return nil, fmt.Errorf("asciicast: header: %w", err)
	}
	return &Writer{w: w, start: start, now: now, pending: map[string][]byte{}}, nil
}

// marshal is v as one line of JSON, with <, > and & as they are (as
// asciinema writes them).
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Output records p as printed by the terminal.
func (w *Writer) Output(p []byte) error { return w.stream(Output, p) }

// Input records p as typed.
func (w *Writer) Input(p []byte) error { return w.stream(Input, p) }

// Resize records the terminal's new size.
func (w *Writer) Resize(cols, rows int) error {
	if cols <= 0 || rows <= 0 {
		return fmt.Errorf("asciicast: terminal size %dx%d: width and height must be positive", cols, rows)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.event(Resize, strconv.Itoa(cols)+"x"+strconv.Itoa(rows))
}

// Mark records a marker with label.
func (w *Writer) Mark(label string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.event(Marker, label)
}

func (w *Writer) stream(typ string, p []byte) error {
	if len(p) == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.closed {
		return w.failed()
	}
	data := p
	if held := w.pending[typ]; len(held) > 0 {
		data = append(held, p...)
	}
	n := completeLen(data)
	// The tail is copied: p is the caller's.
	w.pending[typ] = append(w.pending[typ][:0:0], data[n:]...)
	if n == 0 {
		return nil
	}
	return w.event(typ, string(data[:n]))
}

// completeLen is the length of the part of p that does not end in an
// incomplete UTF-8 sequence: the cut bytes of a character are left for
// the next write.
func completeLen(p []byte) int {
	// A sequence is at most utf8.UTFMax bytes: look for the start of
	// the last one among the final three bytes.
	for i := len(p) - 1; i >= 0 && i >= len(p)-(utf8.UTFMax-1); i-- {
		if utf8.RuneStart(p[i]) {
			if !utf8.FullRune(p[i:]) {
				return i
			}
			break
		}
	}
	return len(p)
}

// event writes one event line; w.mu is held.
func (w *Writer) event(typ, data string) error {
	if w.err != nil || w.closed {
		return w.failed()
	}
	t := w.now().Sub(w.start).Seconds()
	if t < w.last {
		t = w.last
	}
	w.last = t
	d, err := marshal(data)
	if err != nil {
		return err
	}
	line := make([]byte, 0, len(d)+32)
	line = append(line, '[')
	line = strconv.AppendFloat(line, t, 'f', 6, 64)
	line = append(line, `, "`...)
	line = append(line, typ...)
	line = append(line, `", `...)
	line = append(line, bytes.TrimSuffix(d, []byte("\n"))...)
	line = append(line, "]\n"...)
	if _, err := w.w.Write(line); err != nil {
		w.err = fmt.Errorf("asciicast: %w", err)
	}
	return w.err
}

func (w *Writer) failed() error {
	if w.err != nil {
		return w.err
	}
	return errors.New("asciicast: write after Close")
}

// Close writes what is held of a cut character (as U+FFFD) and ends the
// recording; it does not close the underlying writer. It returns the
// first error writing, if any.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.err
	}
	for _, typ := range []string{Output, Input} {
		if held := w.pending[typ]; len(held) > 0 && w.err == nil {
			w.pending[typ] = nil
			_ = w.event(typ, string(held))
		}
	}
	w.closed = true
	return w.err
}

package asciicast

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"strconv"
	"strings"
)

// MaxLine bounds one line of a recording that Reader reads.
const MaxLine = 16 << 20

// ErrFormat is wrapped by every error about a recording's contents.
var ErrFormat = errors.New("not a valid asciicast v2 recording")

// FormatError is what is wrong with a recording, and at which line
// (counted from 1, the header).
type FormatError struct {
	Line int
	Msg  string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

// Unwrap makes every FormatError an ErrFormat.
func (e *FormatError) Unwrap() error { return ErrFormat }

// Reader reads a recording: its header when made, then its events, each
// checked (an array of a time, a type and a string; times from 0 on,
// never going back; a resize's "COLSxROWS").
type Reader struct {
	h    Header
	br   *bufio.Reader
	line int
	last float64
	err  error
}

// NewReader reads and checks the header of the recording r.
func NewReader(r io.Reader) (*Reader, error) {
	rd := &Reader{br: bufio.NewReaderSize(r, 64<<10)}
	b, err := rd.next()
	if err == io.EOF {
		return nil, &FormatError{Line: 1, Msg: "empty file, no asciicast header"}
	}
	if err != nil {
		return nil, err
	}
	if err := parseHeader(b, &rd.h); err != nil {
		return nil, &FormatError{Line: rd.line, Msg: err.Error()}
	}
	return rd, nil
}

// Header is the recording's header.
func (rd *Reader) Header() Header { return rd.h }

// Line is the number of the last line read.
func (rd *Reader) Line() int { return rd.line }

// Next returns the next event, io.EOF after the last one; an error
// sticks.
func (rd *Reader) Next() (Event, error) {
	if rd.err != nil {
		return Event{}, rd.err
	}
	for {
		b, err := rd.next()
		if err != nil {
			rd.err = err
			return Event{}, err
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue // blank lines (a trailing one) are no event
		}
		ev, err := parseEvent(b, rd.last)
		if err != nil {
			rd.err = &FormatError{Line: rd.line, Msg: err.Error()}
			return Event{}, rd.err
		}
		rd.last = ev.Time
		return ev, nil
	}
}

// Events iterates over the remaining events; a failure is the last
// pair, with a zero Event.
func (rd *Reader) Events() iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for {
			ev, err := rd.Next()
			if err == io.EOF {
				return
			}
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// Read reads the header of the recording r and returns it with an
// iterator over its events.
func Read(r io.Reader) (Header, iter.Seq2[Event, error], error) {
	rd, err := NewReader(r)
	if err != nil {
		return Header{}, nil, err
	}
	return rd.h, rd.Events(), nil
}

// next reads one line, without its end.
func (rd *Reader) next() ([]byte, error) {
	var line []byte
	for {
		frag, err := rd.br.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > MaxLine {
			return nil, &FormatError{Line: rd.line + 1, Msg: fmt.Sprintf("line longer than %d MiB", MaxLine>>20)}
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && len(line) == 0:
			return nil, io.EOF
		case err != nil && err != io.EOF:
			return nil, err
		}
		rd.line++
		line = bytes.TrimSuffix(line, []byte("\n"))
		return bytes.TrimSuffix(line, []byte("\r")), nil
	}
}

func parseHeader(b []byte, h *Header) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return errors.New("the header is not a JSON object (is this an asciicast recording?)")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("header: %v", err)
	}
	v, ok := raw["version"]
	if !ok {
		return errors.New("header has no \"version\"")
	}
	var version float64
	if err := json.Unmarshal(v, &version); err != nil {
		return fmt.Errorf("header: \"version\" is not a number")
	}
	if version != Version {
		return fmt.Errorf("asciicast version %s is not supported (version 2 is)", string(v))
	}
	if err := json.Unmarshal(b, h); err != nil {
		return fmt.Errorf("header: %v", err)
	}
	for _, k := range []string{"width", "height"} {
		if _, ok := raw[k]; !ok {
			return fmt.Errorf("header has no %q", k)
		}
	}
	switch {
	case h.Width <= 0 || h.Height <= 0:
		return fmt.Errorf("header: terminal size %dx%d: width and height must be positive", h.Width, h.Height)
	case h.Duration < 0 || math.IsNaN(h.Duration):
		return errors.New("header: negative \"duration\"")
	case h.IdleTimeLimit < 0 || math.IsNaN(h.IdleTimeLimit):
		return errors.New("header: negative \"idle_time_limit\"")
	}
	return nil
}

func parseEvent(b []byte, last float64) (Event, error) {
	var parts []json.RawMessage
	if err := json.Unmarshal(b, &parts); err != nil {
		return Event{}, errors.New("an event must be a JSON array [time, type, data]")
	}
	if len(parts) != 3 {
		return Event{}, fmt.Errorf("an event has 3 elements [time, type, data], this one %d", len(parts))
	}
	var ev Event
	if err := json.Unmarshal(parts[0], &ev.Time); err != nil {
		return Event{}, errors.New("an event's time must be a number of seconds")
	}
	if err := json.Unmarshal(parts[1], &ev.Type); err != nil {
		return Event{}, errors.New("an event's type must be a string")
	}
	if err := json.Unmarshal(parts[2], &ev.Data); err != nil {
		return Event{}, errors.New("an event's data must be a string")
	}
	switch {
	case ev.Time < 0 || math.IsNaN(ev.Time) || math.IsInf(ev.Time, 0):
		return Event{}, fmt.Errorf("event time %v: must be 0 or more", ev.Time)
	case ev.Time < last:
		return Event{}, fmt.Errorf("event time %v goes back (the line before is at %v)", ev.Time, last)
	}
	switch ev.Type {
	case Output, Input, Marker:
	case Resize:
		if _, _, err := ParseSize(ev.Data); err != nil {
			return Event{}, err
		}
	default:
		return Event{}, fmt.Errorf("unknown event type %q (o, i, r or m)", ev.Type)
	}
	return ev, nil
}

// ParseSize parses a resize event's "COLSxROWS".
func ParseSize(s string) (cols, rows int, err error) {
	c, r, ok := strings.Cut(s, "x")
	if ok {
		cols, err = strconv.Atoi(c)
		if err == nil {
			rows, err = strconv.Atoi(r)
		}
	}
	if !ok || err != nil || cols <= 0 || rows <= 0 || cols > 1<<16 || rows > 1<<16 {
		return 0, 0, fmt.Errorf("resize %q: want COLSxROWS, two positive numbers", s)
	}
	return cols, rows, nil
}

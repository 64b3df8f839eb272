package asciicast

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// clock is a fake time source: each call returns the current time;
// tests move it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestWriterFormat(t *testing.T) {
	c := &clock{t: time.Unix(1700000000, 0)}
	var b bytes.Buffer
	w, err := newWriter(&b, Header{Width: 100, Height: 30, Title: "agentkernel attach dev", Env: map[string]string{"TERM": "xterm-256color", "SHELL": "/bin/sh"}}, c.now)
	if err != nil {
		t.Fatal(err)
	}
	c.add(1500 * time.Millisecond)
	if err := w.Output([]byte("a<b>&\"\x1b[0m\n")); err != nil {
		t.Fatal(err)
	}
	c.add(time.Microsecond)
	w.Input([]byte("x"))
	c.add(2 * time.Second)
	w.Resize(120, 40)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want := `{"version":2,"width":100,"height":30,"timestamp":1700000000,"title":"agentkernel attach dev","env":{"SHELL":"/bin/sh","TERM":"xterm-256color"}}
[1.500000, "o", "a<b>&\"\u001b[0m\n"]
[1.500001, "i", "x"]
[3.500001, "r", "120x40"]
`
	if got := b.String(); got != want {
		t.Errorf("file:\n%s\nwant:\n%s", got, want)
	}
	if w.Output([]byte("late")) == nil {
		t.Error("Output after Close: no error")
	}
}

func TestWriterRefusesBadSize(t *testing.T) {
	for _, h := range []Header{{Width: 0, Height: 24}, {Width: 80, Height: -1}} {
		if _, err := NewWriter(io.Discard, h); err == nil {
			t.Errorf("%+v: no error", h)
		}
	}
	w, _ := NewWriter(io.Discard, Header{Width: 80, Height: 24})
	if w.Resize(0, 10) == nil {
		t.Error("Resize(0, 10): no error")
	}
}

func TestRoundTrip(t *testing.T) {
	var b bytes.Buffer
	h := Header{Width: 80, Height: 24, Timestamp: 1234, Command: "/bin/sh", IdleTimeLimit: 2.5}
	w, err := NewWriter(&b, h)
	if err != nil {
		t.Fatal(err)
	}
	outs := []string{"hello ", "wörld ✓ 🙂\r\n", "\x00\x07\t tab", `"quoted" \ back`, "\u2028"}
	for i, s := range outs {
		if err := w.Output([]byte(s)); err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			w.Input([]byte("ls\r"))
			w.Resize(132, 43)
		}
	}
	w.Mark("end")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, evs, err := Read(&b)
	if err != nil {
		t.Fatal(err)
	}
	h.Version = 2
	if fmt.Sprint(got) != fmt.Sprint(h) {
		t.Errorf("header %+v, want %+v", got, h)
	}
	var o strings.Builder
	var types []string
	last := -1.0
	for ev, err := range evs {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Time < last {
			t.Errorf("time went back: %v after %v", ev.Time, last)
		}
		last = ev.Time
		types = append(types, ev.Type)
		switch ev.Type {
		case Output:
			o.WriteString(ev.Data)
		case Input:
			if ev.Data != "ls\r" {
				t.Errorf("input %q", ev.Data)
			}
		case Resize:
			if c, r, err := ParseSize(ev.Data); err != nil || c != 132 || r != 43 {
				t.Errorf("resize %q", ev.Data)
			}
		}
	}
	if o.String() != strings.Join(outs, "") {
		t.Errorf("output %q, want %q", o.String(), strings.Join(outs, ""))
	}
	if strings.Join(types, "") != "oooiroom" {
		t.Errorf("event types %v", types)
	}
}

// TestUTF8Split cuts multi-byte characters at every byte between writes:
// every event line must be valid JSON whose data is valid UTF-8, and the
// whole output must come back unchanged.
func TestUTF8Split(t *testing.T) {
	text := []byte("aé€🙂ö✓ 日本語 🙂🙂x")
	for cut := 1; cut < len(text); cut++ {
		var b bytes.Buffer
		w, _ := NewWriter(&b, Header{Width: 80, Height: 24})
		// Writes of cut bytes, input interleaved (a stream of its own).
		for i := 0; i < len(text); i += cut {
			w.Output(text[i:min(i+cut, len(text))])
			w.Input([]byte{0xe2, 0x82}[:1+i%2]) // a cut "€" on the input stream
		}
		w.Close()
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		var got strings.Builder
		for _, l := range lines[1:] {
			var ev []any
			if err := json.Unmarshal([]byte(l), &ev); err != nil {
				t.Fatalf("cut %d: line %q: %v", cut, l, err)
			}
			s := ev[2].(string)
			if !utf8.ValidString(s) {
				t.Fatalf("cut %d: invalid UTF-8 in %q", cut, l)
			}
			// An event line holds only whole characters: no U+FFFD.
			if ev[1] == "o" {
				if strings.ContainsRune(s, utf8.RuneError) {
					t.Fatalf("cut %d: a character was split: %q", cut, l)
				}
				got.WriteString(s)
			}
		}
		if got.String() != string(text) {
			t.Fatalf("cut %d: output %q, want %q", cut, got.String(), text)
		}
	}
}

// TestInvalidUTF8 writes bytes that are no UTF-8 at all: the file stays
// valid JSON, with U+FFFD for them, and a cut sequence left at Close is
// written as U+FFFD too.
func TestInvalidUTF8(t *testing.T) {
	var b bytes.Buffer
	w, _ := NewWriter(&b, Header{Width: 80, Height: 24})
	w.Output([]byte("a\xffb\xc3"))
	w.Close()
	file := b.String()
	s, err := Scan(&b)
	if err != nil {
		t.Fatal(err)
	}
	if s.Outputs != 2 {
		t.Errorf("%d output events, want 2 (the held byte at Close)", s.Outputs)
	}
	if !strings.Contains(file, `"a\ufffdb"`) || !strings.Contains(file, `"\ufffd"]`) {
		t.Errorf("invalid bytes not replaced: %q", file)
	}
}

// TestConcurrentWriters writes from several goroutines at once: every
// line must be whole and the times never go back.
func TestConcurrentWriters(t *testing.T) {
	var b bytes.Buffer
	w, _ := NewWriter(&b, Header{Width: 80, Height: 24})
	var wg sync.WaitGroup
	const n, each = 8, 200
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				switch g % 3 {
				case 0:
					w.Output([]byte(fmt.Sprintf("g%d-%d é\n", g, i)))
				case 1:
					w.Input([]byte("ü"))
				default:
					w.Resize(80+i, 24)
				}
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Scan(&b)
	if err != nil {
		t.Fatal(err)
	}
	if s.Events != n*each {
		t.Errorf("%d events, want %d", s.Events, n*each)
	}
}

func TestMalformed(t *testing.T) {
	hdr := `{"version":2,"width":80,"height":24,"timestamp":1}` + "\n"
	cases := []struct {
		name, file string
		line       int
		msg        string
	}{
		{"empty", "", 1, "empty"},
		{"not json", "#!/bin/sh\necho hi\n", 1, "not a JSON object"},
		{"typescript", "Script started on 2024-01-01\n", 1, "not a JSON object"},
		{"version 1", `{"version":1,"width":80,"height":24,"stdout":[]}` + "\n", 1, "version 1 is not supported"},
		{"no version", `{"width":80,"height":24}` + "\n", 1, `no "version"`},
		{"no width", `{"version":2,"height":24}` + "\n", 1, `no "width"`},
		{"zero size", `{"version":2,"width":0,"height":24}` + "\n", 1, "must be positive"},
		{"bad header json", `{"version":2,"width":80,` + "\n", 1, "header"},
		{"event not array", hdr + `[0.1, "o", "a"]` + "\n" + `{"a":1}` + "\n", 3, "JSON array"},
		{"two elements", hdr + `[0.1, "o"]` + "\n", 2, "3 elements"},
		{"time string", hdr + `["0.1", "o", "a"]` + "\n", 2, "time must be a number"},
		{"negative time", hdr + `[-1, "o", "a"]` + "\n", 2, "0 or more"},
		{"time back", hdr + `[2.0, "o", "a"]` + "\n" + `[1.0, "o", "b"]` + "\n", 3, "goes back"},
		{"bad type", hdr + `[0.1, "x", "a"]` + "\n", 2, "unknown event type"},
		{"data number", hdr + `[0.1, "o", 5]` + "\n", 2, "data must be a string"},
		{"bad resize", hdr + `[0.1, "r", "80by24"]` + "\n", 2, "COLSxROWS"},
		{"garbage line", hdr + "\n" + `[0.1, "o", "a"]` + "\nhello\n", 4, "JSON array"},
	}
	for _, c := range cases {
		_, err := Scan(strings.NewReader(c.file))
		var fe *FormatError
		if !errors.As(err, &fe) || !errors.Is(err, ErrFormat) {
			t.Errorf("%s: error %v, want a FormatError", c.name, err)
			continue
		}
		if fe.Line != c.line || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %q, want line %d and %q", c.name, err, c.line, c.msg)
		}
		if !strings.HasPrefix(err.Error(), fmt.Sprintf("line %d: ", c.line)) {
			t.Errorf("%s: %q does not start with the line", c.name, err)
		}
	}
}

func TestLongLine(t *testing.T) {
	r := io.MultiReader(strings.NewReader(`{"version":2,"width":80,"height":24}`+"\n"+`[0.1, "o", "`),
		io.LimitReader(repeatReader('a'), MaxLine+10))
	_, err := Scan(r)
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Line != 2 || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("error %v, want line 2 too long", err)
	}
}

type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

func TestAcceptsAsciinemaFile(t *testing.T) {
	// As asciinema 2 writes one: extra header keys, CRLF, a trailing
	// blank line, markers.
	f := "{\"version\": 2, \"width\": 213, \"height\": 58, \"timestamp\": 1598956045, \"env\": {\"SHELL\": \"/bin/zsh\", \"TERM\": \"xterm-256color\"}, \"theme\": {\"fg\": \"#d0d0d0\"}}\r\n" +
		"[0.010505, \"o\", \"\\u001b]2;~\\u0007\"]\r\n[1.5, \"m\", \"\"]\r\n[2.2, \"o\", \"exit\\r\\n\"]\r\n\r\n"
	s, err := Scan(strings.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	if s.Header.Width != 213 || s.Header.Env["SHELL"] != "/bin/zsh" || s.Events != 3 || s.Outputs != 2 || s.Duration != 2.2 {
		t.Errorf("summary %+v", s)
	}
}

// castOf is a recording of outputs at the given times.
func castOf(times []float64, idle float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"version":2,"width":80,"height":24,"idle_time_limit":%v}`+"\n", idle)
	for i, t := range times {
		fmt.Fprintf(&b, "[%.6f, \"o\", \"e%d \"]\n", t, i)
		fmt.Fprintf(&b, "[%.6f, \"i\", \"typed\"]\n", t)
	}
	return b.String()
}

// stamped records when each write came, relative to its start.
type stamped struct {
	start time.Time
	at    []time.Duration
	data  strings.Builder
}

func (s *stamped) Write(p []byte) (int, error) {
	s.at = append(s.at, time.Since(s.start))
	s.data.Write(p)
	return len(p), nil
}

// TestReplayTiming measures when each output comes: gaps divided by the
// speed, long ones capped by maxIdle (or the header's limit), inputs not
// written.
func TestReplayTiming(t *testing.T) {
	times := []float64{0.1, 0.3, 3.3, 3.4} // a 3 s idle gap
	cases := []struct {
		name    string
		speed   float64
		maxIdle time.Duration
		header  float64
		want    []time.Duration
	}{
		{"speed 2, capped at 150ms", 2, 150 * time.Millisecond, 0, []time.Duration{50, 150, 300, 350}},
		{"speed 1, capped at 200ms", 1, 200 * time.Millisecond, 0, []time.Duration{100, 300, 500, 600}},
		{"header limit 0.25s", 4, 0, 0.25, []time.Duration{25, 75, 325, 350}},
		{"flag over header", 1, 100 * time.Millisecond, 5, []time.Duration{100, 200, 300, 400}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &stamped{start: time.Now()}
			if err := Replay(context.Background(), strings.NewReader(castOf(times, c.header)), s, c.speed, c.maxIdle); err != nil {
				t.Fatal(err)
			}
			if s.data.String() != "e0 e1 e2 e3 " {
				t.Errorf("played %q", s.data.String())
			}
			if len(s.at) != len(c.want) {
				t.Fatalf("%d writes, want %d", len(s.at), len(c.want))
			}
			for i, w := range c.want {
				w *= time.Millisecond
				// Never early; late by a scheduling delay at most.
				if s.at[i] < w-time.Millisecond || s.at[i] > w+60*time.Millisecond {
					t.Errorf("event %d at %v, want %v", i, s.at[i], w)
				}
			}
		})
	}
}

func TestReplayStops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err := Replay(ctx, strings.NewReader(castOf([]float64{0, 30}, 0)), io.Discard, 1, 0)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 2*time.Second {
		t.Errorf("error %v after %v", err, time.Since(t0))
	}
	for _, sp := range []float64{0, -1} {
		if Replay(context.Background(), strings.NewReader(castOf(nil, 0)), io.Discard, sp, 0) == nil {
			t.Errorf("speed %v: no error", sp)
		}
	}
	// A malformed line stops it, with the line's number.
	var out strings.Builder
	err = Replay(context.Background(), strings.NewReader(castOf([]float64{0}, 0)+"[oops]\n"), &out, 1, 0)
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Line != 4 || out.String() != "e0 " {
		t.Errorf("error %v, played %q", err, out.String())
	}
}

func TestPaths(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("X", 3600))
	if got := FileName("dev", at); got != "dev-20260304-040607.cast" {
		t.Errorf("FileName: %s", got)
	}
	data, dir := t.TempDir(), t.TempDir()
	if got := Path("", data, "dev", at); got != filepath.Join(data, "recordings", "dev-20260304-040607.cast") {
		t.Errorf("Path default: %s", got)
	}
	if got := Path(dir, data, "dev", at); got != filepath.Join(dir, "dev-20260304-040607.cast") {
		t.Errorf("Path dir: %s", got)
	}
	if got := Path("x.cast", data, "dev", at); got != "x.cast" {
		t.Errorf("Path file: %s", got)
	}
}

func TestCreate(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "recordings", "a.cast")
	f, err := Create(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	st, _ := os.Stat(p)
	dst, _ := os.Stat(filepath.Dir(p))
	if st.Mode().Perm() != 0o600 || dst.Mode().Perm() != 0o700 {
		t.Errorf("modes %v %v", st.Mode(), dst.Mode())
	}
	if _, err := Create(p); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("existing file: %v", err)
	}
	// A symbolic link is not followed, even to a file that is not there.
	target := filepath.Join(dir, "target")
	link := filepath.Join(dir, "link.cast")
	os.Symlink(target, link)
	if _, err := Create(link); err == nil {
		t.Error("Create through a symbolic link: no error")
	}
	if _, err := os.Lstat(target); err == nil {
		t.Error("the link's target was created")
	}
}

package api

import (
	"bytes"
	"errors"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// sse writes Server-Sent Events frames, one flush per frame.
type sse struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
	// dead is set once a write failed (client gone).
	dead bool
}

// event writes `event: NAME\ndata: <compact JSON>\n\n` and flushes it.
func (s *sse) event(name string, data any) {
	b, err := marshal(data)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return
	}
	var f bytes.Buffer
	f.Grow(len(name) + len(b) + 16)
	f.WriteString("event: ")
	f.WriteString(name)
	f.WriteString("\ndata: ")
	f.Write(b)
	f.WriteString("\n\n")
	if _, err := s.w.Write(f.Bytes()); err != nil {
		s.dead = true
		return
	}
	if err := s.rc.Flush(); err != nil {
		s.dead = true
	}
}

// streamWriter turns one of the command's streams into output frames.
// A multi-byte character split across two writes is held back until it is
// whole, so that every frame's data is valid UTF-8.
type streamWriter struct {
	s       *sse
	stream  string
	pending []byte
}

func (w *streamWriter) Write(p []byte) (int, error) {
	buf := append(w.pending, p...)
	cut := len(buf)
	// Hold back an incomplete rune at the end (at most 3 bytes).
	for i := 1; i <= 3 && i <= len(buf); i++ {
		c := buf[len(buf)-i]
		if c < 0x80 {
			break
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(buf[len(buf)-i:]) {
				cut = len(buf) - i
			}
			break
		}
	}
	w.pending = append([]byte(nil), buf[cut:]...)
	if cut > 0 {
		w.s.event("output", map[string]string{"data": string(buf[:cut]), "stream": w.stream})
	}
	return len(p), nil
}

func (w *streamWriter) flush() {
	if len(w.pending) > 0 {
		w.s.event("output", map[string]string{"data": string(w.pending), "stream": w.stream})
		w.pending = nil
	}
}

// runStream is POST /run/stream: the run of /run, its output sent as it
// happens. Bad requests are answered as JSON before the stream starts.
func (s *Server) runStream(w http.ResponseWriter, r *http.Request) {
	var q runRequest
	if err := decode(w, r, &q, false); err != nil {
		s.fail(w, "", err)
		return
	}
	spec, err := s.spec(r, q)
	if err != nil {
		s.fail(w, "", err)
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	ev := &sse{w: w, rc: rc}
	ev.event("started", map[string]any{"command": q.Command, "fast": q.fast(), "timestamp": time.Now().UTC().Format(time.RFC3339Nano)})

	stdout := &streamWriter{s: ev, stream: "stdout"}
	stderr := &streamWriter{s: ev, stream: "stderr"}
	res, err := s.execute(r.Context(), spec, q.fast(), sandbox.Stdio{Stdout: stdout, Stderr: stderr})
	stdout.flush()
	stderr.flush()
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = s.classify("", err)
		}
		if ae.exitCode != nil {
			ev.event("done", map[string]any{"exit_code": *ae.exitCode, "success": false})
			return
		}
		ev.event("error", map[string]string{"message": ae.msg})
		return
	}
	if note := res.OOMText(); note != "" {
		// After the command's own output, where every SDK shows it.
		ev.event("output", map[string]string{"data": sandbox.AppendNote("", note), "stream": "stderr"})
	}
	ev.event("done", map[string]any{"exit_code": res.ExitCode, "success": res.ExitCode == 0})
}

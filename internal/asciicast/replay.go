package asciicast

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// Replay writes the output events of the recording r to out with the
// recording's timing, speed times as fast: the pause before each event
// is its distance from the previous one divided by speed, capped at
// maxIdle when maxIdle > 0 (else at the header's idle_time_limit, when
// it has one). Pauses are measured from the start of the replay, so
// that time spent writing does not add up. Input, resize and marker
// events are not written. It stops when ctx ends (returning ctx's
// error) and at the first malformed line (a FormatError with its line
// number); what came before was played.
func Replay(ctx context.Context, r io.Reader, out io.Writer, speed float64, maxIdle time.Duration) error {
	if speed <= 0 || math.IsNaN(speed) || math.IsInf(speed, 0) {
		return fmt.Errorf("asciicast: replay speed %v: must be a positive number", speed)
	}
	if maxIdle < 0 {
		return errors.New("asciicast: negative idle limit")
	}
	rd, err := NewReader(r)
	if err != nil {
		return err
	}
	limit := maxIdle
	if limit == 0 && rd.h.IdleTimeLimit > 0 {
		limit = time.Duration(rd.h.IdleTimeLimit * float64(time.Second))
	}
	start := time.Now()
	var at time.Duration // where in the replay the next event is due
	prev := 0.0
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		gap := time.Duration((ev.Time - prev) / speed * float64(time.Second))
		if limit > 0 && gap > limit {
			gap = limit
		}
		prev = ev.Time
		at += gap
		if ev.Type != Output {
			continue
		}
		if wait := time.Until(start.Add(at)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
			}
		} else if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := io.WriteString(out, ev.Data); err != nil {
			return err
		}
	}
}

// Summary is what Scan learns of a recording.
type Summary struct {
	Header Header
	// Duration is the time of the last event, in seconds.
	Duration float64
	// Events counts the events, Outputs the output events among them.
	Events, Outputs int
}

// Scan reads the whole recording r, checking every line.
func Scan(r io.Reader) (Summary, error) {
	rd, err := NewReader(r)
	if err != nil {
		return Summary{}, err
	}
	s := Summary{Header: rd.h}
	for ev, err := range rd.Events() {
		if err != nil {
			return s, err
		}
		s.Events++
		if ev.Type == Output {
			s.Outputs++
		}
		s.Duration = ev.Time
	}
	return s, nil
}

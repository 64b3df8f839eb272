package mcp

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// progressEvery is how often a command's new output (or, when it printed
// nothing, a heartbeat) is sent as a progress notification.
const progressEvery = time.Second

// heartbeatEvery is how long a silent command goes between heartbeats.
const heartbeatEvery = 5 * time.Second

// output collects a command's stdout and stderr in order, keeping the
// first and last maxOutput/2 bytes, and, when the client sent a progress
// token, streams new output as notifications/progress messages.
type output struct {
	mu      sync.Mutex
	head    []byte
	tail    []byte
	dropped int64
	pending strings.Builder

	done chan struct{}
	wg   sync.WaitGroup
}

func newOutput(ctx context.Context, req *sdk.CallToolRequest) *output {
	o := &output{done: make(chan struct{})}
	if req == nil || req.Params == nil || req.Session == nil {
		return o
	}
	token := req.Params.GetProgressToken()
	if token == nil {
		return o
	}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		o.progress(ctx, req.Session, token)
	}()
	return o
}

func (o *output) progress(ctx context.Context, ss *sdk.ServerSession, token any) {
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	start, last := time.Now(), time.Now()
	n := 0
	send := func(msg string) {
		n++
		_ = ss.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: float64(n), Message: msg})
		last = time.Now()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.done:
			if chunk := o.takePending(); chunk != "" {
				send(chunk)
			}
			return
		case <-tick.C:
			if chunk := o.takePending(); chunk != "" {
				send(chunk)
			} else if time.Since(last) >= heartbeatEvery {
				send(fmt.Sprintf("still running (%s)", time.Since(start).Round(time.Second)))
			}
		}
	}
}

// maxChunk bounds one progress message.
const maxChunk = 16 << 10

func (o *output) takePending() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.pending.String()
	o.pending.Reset()
	if len(s) > maxChunk {
		s = "…" + s[len(s)-maxChunk:]
	}
	return s
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pending.Len() < 4*maxChunk {
		o.pending.Write(p)
	}
	n := len(p)
	if room := maxOutput/2 - len(o.head); room > 0 {
		k := min(room, len(p))
		o.head = append(o.head, p[:k]...)
		p = p[k:]
	}
	if len(p) > 0 {
		o.tail = append(o.tail, p...)
		if over := len(o.tail) - maxOutput/2; over > 0 {
			o.dropped += int64(over)
			o.tail = append(o.tail[:0], o.tail[over:]...)
		}
	}
	return n, nil
}

// stop ends the progress stream (flushing what is pending).
func (o *output) stop() {
	select {
	case <-o.done:
	default:
		close(o.done)
	}
	o.wg.Wait()
}

// text is everything written, with the middle cut when it was too long.
func (o *output) text() string {
	o.stop()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dropped == 0 {
		return string(o.head) + string(o.tail)
	}
	return fmt.Sprintf("%s\n[… %d bytes of output omitted …]\n%s", o.head, o.dropped, o.tail)
}

// stdio returns one pipe for both stdout and stderr, so that their lines
// keep the order in which the command wrote them, copied into o. finish
// closes the write end and waits (at most a moment, in case a background
// process still holds it) for the rest of the output.
func (o *output) stdio() (w *os.File, finish func(), err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(o, r)
		close(copied)
	}()
	return w, func() {
		w.Close()
		select {
		case <-copied:
		case <-time.After(2 * time.Second):
		}
		r.Close()
	}, nil
}

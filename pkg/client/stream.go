package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strings"
)

// Event is one Server-Sent Event of RunStream. Name is "started",
// "progress", "output", "done" or "error"; Data is its JSON payload, and
// the fields below are filled from it for the names that carry them.
type Event struct {
	Name string
	Data json.RawMessage

	// output
	Output string // the chunk
	Stream string // "stdout" or "stderr"
	// done
	ExitCode int
	Success  bool
	// error
	Message string
}

// RunStream runs cmd in a fresh sandbox and yields its events as they
// arrive: started, output chunks, then done or error (the last one). A
// request the server refuses before streaming yields one *APIError.
// Stopping the iteration early closes the connection, which stops the
// command.
func (c *Client) RunStream(ctx context.Context, cmd []string, o *RunOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		resp, err := c.send(ctx, http.MethodPost, "/run/stream", nil, runRequest(cmd, o))
		if err != nil {
			yield(Event{}, err)
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			b, _ := io.ReadAll(resp.Body)
			err := decodeAnswer(resp.StatusCode, b, nil)
			if err == nil {
				err = fmt.Errorf("agentkernel: %w: status %d without an event stream", ErrBadAnswer, resp.StatusCode)
			}
			yield(Event{}, err)
			return
		}
		r := bufio.NewReader(resp.Body)
		var name string
		var data strings.Builder
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				if err != io.EOF || line != "" {
					yield(Event{}, fmt.Errorf("agentkernel: event stream: %w", err))
				} else {
					yield(Event{}, fmt.Errorf("agentkernel: event stream ended before done: %w", io.ErrUnexpectedEOF))
				}
				return
			}
			line = strings.TrimRight(line, "\r\n")
			switch {
			case line == "":
				if data.Len() == 0 && name == "" {
					continue
				}
				ev := parseEvent(name, data.String())
				name = ""
				data.Reset()
				if !yield(ev, nil) || ev.Name == "done" || ev.Name == "error" {
					return
				}
			case strings.HasPrefix(line, ":"):
				// comment / heartbeat
			case strings.HasPrefix(line, "event:"):
				name = strings.TrimPrefix(strings.TrimPrefix(line, "event:"), " ")
			case strings.HasPrefix(line, "data:"):
				if data.Len() > 0 {
					data.WriteByte('\n')
				}
				data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
			}
		}
	}
}

func parseEvent(name, data string) Event {
	if name == "" {
		name = "message"
	}
	ev := Event{Name: name, Data: json.RawMessage(data)}
	var f struct {
		Data     string `json:"data"`
		Stream   string `json:"stream"`
		ExitCode int    `json:"exit_code"`
		Success  bool   `json:"success"`
		Message  string `json:"message"`
	}
	if json.Unmarshal([]byte(data), &f) == nil {
		ev.Output, ev.Stream, ev.ExitCode, ev.Success, ev.Message = f.Data, f.Stream, f.ExitCode, f.Success, f.Message
	}
	return ev
}

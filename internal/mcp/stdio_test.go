package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// rawSession runs the real server (the SDK's server over this package's
// stdio transport) on pipes and speaks raw lines to it.
type rawSession struct {
	t    *testing.T
	in   *io.PipeWriter
	out  *bufio.Reader
	done chan error
}

func newRawSession(t *testing.T) *rawSession {
	t.Helper()
	return newRawSessionWith(t, Options{Manager: sandbox.NewManager(sandbox.ManagerOptions{}), Dir: t.TempDir(), Version: "test"})
}

func newRawSessionWith(t *testing.T, opts Options) *rawSession {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := NewServer(opts)
	rs := &rawSession{t: t, in: inW, out: bufio.NewReaderSize(outR, 1<<20), done: make(chan error, 1)}
	go func() {
		in, out := stdio(ctx, inR, outW)
		rs.done <- serveIO(ctx, s, in, out)
		outW.Close()
	}()
	t.Cleanup(func() {
		inW.Close()
		cancel()
		select {
		case <-rs.done:
		case <-time.After(5 * time.Second):
			t.Error("the server did not end")
		}
	})
	rs.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m := rs.recv(); m["id"] != float64(0) || m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	rs.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return rs
}

func (rs *rawSession) send(line string) {
	rs.t.Helper()
	if _, err := io.WriteString(rs.in, line+"\n"); err != nil {
		rs.t.Fatalf("write %.80q: %v", line, err)
	}
}

// recv reads one stdout line: a JSON-RPC message, or the test fails.
func (rs *rawSession) recv() map[string]any {
	rs.t.Helper()
	type lineErr struct {
		line string
		err  error
	}
	ch := make(chan lineErr, 1)
	go func() {
		l, err := rs.out.ReadString('\n')
		ch <- lineErr{l, err}
	}()
	select {
	case le := <-ch:
		if le.err != nil {
			select {
			case err := <-rs.done:
				rs.t.Fatalf("the session ended: %v", err)
			default:
			}
			rs.t.Fatalf("read: %v", le.err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(le.line), &m); err != nil {
			rs.t.Fatalf("stdout line is not JSON: %q", le.line)
		}
		return m
	case <-time.After(10 * time.Second):
		rs.t.Fatal("no answer within 10 s")
	}
	return nil
}

// TestStdioMalformedInput: every malformed line gets a JSON-RPC error and
// the session goes on; before, the first one ended it (exit 125, no
// answer).
func TestStdioMalformedInput(t *testing.T) {
	rs := newRawSession(t)
	deep := strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)
	for _, c := range []struct {
		line    string
		code    float64
		id      any // the id the error must carry
		message string
	}{
		{`this is not json`, codeParseError, nil, "Parse error: invalid character 'h'"},
		{`{"jsonrpc":"2.0","id":5,"method":"tools/li`, codeParseError, nil, "Parse error: unexpected end of JSON input"},
		{`{"jsonrpc":"2.0","id":5}{"x":1}`, codeParseError, nil, "Parse error"},
		{"\xff\xfe{}", codeParseError, nil, "not UTF-8"},
		{`{}`, codeInvalidRequest, nil, `"jsonrpc" must be "2.0"`},
		{`[]`, codeInvalidRequest, nil, "batches"},
		{`[{"jsonrpc":"2.0","id":7,"method":"ping"}]`, codeInvalidRequest, nil, "batches"},
		{`42`, codeInvalidRequest, nil, "JSON object"},
		{`"a string"`, codeInvalidRequest, nil, "JSON object"},
		{`null`, codeInvalidRequest, nil, "JSON object"},
		{`{"jsonrpc":"1.0","id":3,"method":"ping"}`, codeInvalidRequest, float64(3), `"jsonrpc" must be "2.0"`},
		{`{"id":"s","method":"ping"}`, codeInvalidRequest, "s", `"jsonrpc" must be "2.0"`},
		{`{"jsonrpc":2.0,"id":3,"method":"ping"}`, codeInvalidRequest, float64(3), `"jsonrpc" must be "2.0"`},
		{`{"jsonrpc":"2.0","id":4,"method":5}`, codeInvalidRequest, float64(4), `"method" must be a string`},
		{`{"jsonrpc":"2.0","id":4,"method":null}`, codeInvalidRequest, float64(4), `"method" must be a string`},
		{`{"jsonrpc":"2.0","id":true,"method":"ping"}`, codeInvalidRequest, nil, `"id" must be a string or an integer`},
		{`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, codeInvalidRequest, nil, `"id" must be`},
		{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, codeInvalidRequest, nil, "not null"},
		{`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, codeInvalidRequest, nil, "not an integer"},
		{`{"jsonrpc":"2.0","id":1e300,"method":"ping"}`, codeInvalidRequest, nil, "not an integer"},
		{`{"jsonrpc":"2.0","id":6,"method":"ping","params":5}`, codeInvalidRequest, float64(6), `"params" must be an object`},
		{`{"jsonrpc":"2.0","id":6,"method":"ping","result":{}}`, codeInvalidRequest, float64(6), "not \"result\""},
		{`{"jsonrpc":"2.0","result":{}}`, codeInvalidRequest, nil, "response"},
		{`{"jsonrpc":"2.0","id":8}`, codeInvalidRequest, float64(8), "exactly one"},
		{`{"jsonrpc":"2.0","id":8,"error":5}`, codeInvalidRequest, float64(8), `"error" must be an object`},
		{`{"jsonrpc":"2.0","id":8,"error":{"code":"x","message":"m"}}`, codeInvalidRequest, float64(8), `"error.code"`},
		{deep, codeInvalidRequest, nil, "levels deep"},
	} {
		rs.send(c.line)
		m := rs.recv()
		e, _ := m["error"].(map[string]any)
		if m["jsonrpc"] != "2.0" || e == nil || e["code"] != c.code || m["id"] != c.id || !strings.Contains(fmt.Sprint(e["message"]), c.message) {
			t.Errorf("%.60q: answered %v; want code %v, id %v, message with %q", c.line, m, c.code, c.id, c.message)
		}
	}
	// Blank lines are skipped; trailing blanks, CRLF and a fractionless
	// float id are fine (the SDK alone ended the session on trailing
	// spaces).
	rs.send("")
	rs.send("   \t")
	rs.send(`{"jsonrpc":"2.0","id":10,"method":"ping"}   ` + "\r")
	if m := rs.recv(); m["id"] != float64(10) || m["result"] == nil {
		t.Errorf("ping with trailing blanks: %v", m)
	}
	rs.send(`{"jsonrpc":"2.0","id":1e1,"method":"ping"}`)
	if m := rs.recv(); m["id"] != float64(10) || m["result"] == nil {
		t.Errorf("ping with id 1e1: %v", m)
	}
	// A response to a request the server never sent is accepted and
	// ignored, as the SDK does.
	rs.send(`{"jsonrpc":"2.0","id":77,"result":{}}`)
	// And the session still answers.
	rs.send(`{"jsonrpc":"2.0","id":"last","method":"tools/list"}`)
	m := rs.recv()
	res, _ := m["result"].(map[string]any)
	if tools, _ := res["tools"].([]any); m["id"] != "last" || len(tools) != 9 {
		t.Fatalf("tools/list after the bad lines: %v", m)
	}
}

// TestStdioOversizedLine: a line over MaxMessageBytes is answered with an
// error without being kept, and the session goes on.
func TestStdioOversizedLine(t *testing.T) {
	rs := newRawSession(t)
	big := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"` + strings.Repeat("a", MaxMessageBytes) + `"}}`
	go func() { _, _ = io.WriteString(rs.in, big+"\n") }()
	m := rs.recv()
	if e, _ := m["error"].(map[string]any); e == nil || e["code"] != float64(codeInvalidRequest) || !strings.Contains(fmt.Sprint(e["message"]), "longer than") || m["id"] != nil {
		t.Fatalf("oversized line: %v", m)
	}
	rs.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if m := rs.recv(); m["id"] != float64(2) || m["result"] == nil {
		t.Fatalf("ping after the oversized line: %v", m)
	}
	// Just under the bound passes (re-encoded, it must still fit the
	// SDK's own bound).
	fits := `{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":"` + strings.Repeat("\u2028", (MaxMessageBytes-100)/3) + `"}}`
	go func() { _, _ = io.WriteString(rs.in, fits+"\n") }()
	if m := rs.recv(); m["id"] != float64(3) || m["result"] == nil {
		t.Fatalf("ping of %d bytes: %v", len(fits), m)
	}
}

// TestStdioEOFDrains: requests written before stdin closes are all
// answered; answers of ours (errors) do not hold EOF back.
func TestStdioEOFDrains(t *testing.T) {
	var out bytes.Buffer
	in := io.NopCloser(strings.NewReader(strings.Join([]string{
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`garbage`,
		`{"jsonrpc":"2.0","id":"a","method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":"b","method":"ping"}`, // last line without a newline
	}, "\n")))
	s := NewServer(Options{Manager: sandbox.NewManager(sandbox.ManagerOptions{}), Dir: t.TempDir()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, w := stdio(ctx, in, nopWriteCloser{&out})
	if err := serveIO(ctx, s, r, w); err != nil && ctx.Err() != nil {
		t.Fatalf("serve: %v (timed out waiting to drain)", err)
	}
	got := map[any]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("stdout line %q", line)
		}
		got[m["id"]] = true
	}
	for _, id := range []any{float64(0), nil, "a", "b"} {
		if !got[id] {
			t.Errorf("no answer with id %v:\n%s", id, out.String())
		}
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// TestHTTPMalformedBodies: /mcp answers bodies that are not JSON-RPC
// messages with 400 (413 when too large) and a JSON-RPC error, and goes
// on serving the session.
func TestHTTPMalformedBodies(t *testing.T) {
	s := NewServer(Options{Manager: sandbox.NewManager(sandbox.ManagerOptions{}), Dir: t.TempDir()})
	srv := httptest.NewServer(Handler(s, nil))
	defer srv.Close()
	post := func(body, session string) (int, http.Header, string) {
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	code, h, body := post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, "")
	sid := h.Get("Mcp-Session-Id")
	if code != 200 || sid == "" {
		t.Fatalf("initialize: %d %s", code, body)
	}
	post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, sid)
	for _, c := range []struct {
		body   string
		status int
		code   float64
	}{
		{`garbage`, 400, codeParseError},
		{``, 400, codeParseError},
		{`{}`, 400, codeInvalidRequest},
		{`[]`, 400, codeInvalidRequest},
		{`[{"jsonrpc":"2.0","id":7,"method":"ping"}]`, 400, codeInvalidRequest},
		{`42`, 400, codeInvalidRequest},
		{`{"jsonrpc":"1.0","id":3,"method":"ping"}`, 400, codeInvalidRequest},
		{`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, 400, codeInvalidRequest},
		{`{"jsonrpc":"2.0","id":5,"method":"tools/li`, 400, codeParseError},
		{`{"jsonrpc":"2.0","id":5,"method":"ping","params":{"x":"` + strings.Repeat("a", MaxMessageBytes) + `"}}`, 413, codeInvalidRequest},
	} {
		status, h, body := post(c.body, sid)
		var m map[string]any
		err := json.Unmarshal([]byte(body), &m)
		e, _ := m["error"].(map[string]any)
		if status != c.status || err != nil || e == nil || e["code"] != c.code || h.Get("Content-Type") != "application/json" {
			t.Errorf("%.50q: %d %s %.200s; want %d with JSON-RPC error %v", c.body, status, h.Get("Content-Type"), body, c.status, c.code)
		}
	}
	// The session still answers, trailing blanks and all.
	status, _, body := post(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}  `+"\n", sid)
	if status != 200 || !strings.Contains(body, `"id":9`) || !strings.Contains(body, "sandbox_run") {
		t.Fatalf("tools/list after bad bodies: %d %.300s", status, body)
	}
	// So does a client of the SDK.
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

// blocking is a backend whose runs start (entered) and then wait for
// release.
type blocking struct {
	entered, release chan struct{}
}

func (b *blocking) Name() string { return "blocking" }

func (b *blocking) Run(ctx context.Context, spec *sandbox.Spec, stdio sandbox.Stdio) (sandbox.Result, error) {
	b.entered <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return sandbox.Result{}, nil
}

// TestStdioInFlightIDRefused: a request that reuses the id of one still
// being answered is refused with that id (the SDK would answer it with a
// null id, or mix the two up); once the first is answered, the id may be
// used again.
func TestStdioInFlightIDRefused(t *testing.T) {
	b := &blocking{entered: make(chan struct{}, 1), release: make(chan struct{})}
	rs := newRawSessionWith(t, Options{Version: "test", Dir: t.TempDir(),
		Manager: sandbox.NewManager(sandbox.ManagerOptions{Images: hostImages{}, Backends: []sandbox.Backend{b}, Default: "blocking"})})
	rs.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"sandbox_run","arguments":{"command":["true"],"image":"host"}}}`)
	select {
	case <-b.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not start")
	}
	rs.send(`{"jsonrpc":"2.0","id":7,"method":"ping"}`)
	m := rs.recv()
	if e, _ := m["error"].(map[string]any); e == nil || e["code"] != float64(codeInvalidRequest) || m["id"] != float64(7) ||
		!strings.Contains(fmt.Sprint(e["message"]), "still being answered") {
		t.Errorf("a second request with id 7: %v", m)
	}
	close(b.release)
	m = rs.recv()
	if res, _ := m["result"].(map[string]any); m["id"] != float64(7) || res == nil || res["isError"] == true {
		t.Errorf("the run's answer: %v", m)
	}
	rs.send(`{"jsonrpc":"2.0","id":7,"method":"ping"}`)
	if m := rs.recv(); m["id"] != float64(7) || m["result"] == nil {
		t.Errorf("id 7 after its answer: %v", m)
	}
}

// slowOut holds the write of the line that answers id "p" until
// released; closed is closed by Close.
type slowOut struct {
	mu                       sync.Mutex
	buf                      bytes.Buffer
	entered, release, closed chan struct{}
	closeOnce                sync.Once
}

func (w *slowOut) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"id":"p"`)) {
		close(w.entered)
		<-w.release
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *slowOut) Close() error {
	w.closeOnce.Do(func() { close(w.closed) })
	return nil
}

func (w *slowOut) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestStdioDrainWaitsForWrite: an answer counts as given before its
// bytes go out (so that its id may be reused at once), yet at EOF the
// drain waits for that write to finish, so that EOF does not reach the
// SDK, which then closes stdout, under a write in progress.
func TestStdioDrainWaitsForWrite(t *testing.T) {
	out := &slowOut{entered: make(chan struct{}), release: make(chan struct{}), closed: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := newStdioConn(ctx, io.NopCloser(strings.NewReader(`{"jsonrpc":"2.0","id":"p","method":"ping"}`+"\n")), out)
	if _, err := c.Read(make([]byte, 4096)); err != nil || !c.isPending(idKey([]byte(`"p"`))) {
		t.Fatalf("read the ping: %v", err)
	}
	wrote := make(chan struct{})
	go func() {
		_, _ = c.Write([]byte(`{"jsonrpc":"2.0","id":"p","result":{}}` + "\n"))
		close(wrote)
	}()
	<-out.entered
	if c.isPending(idKey([]byte(`"p"`))) {
		t.Errorf("the answer being written does not count yet")
	}
	drained := make(chan struct{})
	go func() {
		c.drain()
		close(drained)
	}()
	select {
	case <-drained:
		t.Errorf("the drain ended while the last answer was still being written")
	case <-time.After(300 * time.Millisecond):
	}
	close(out.release)
	<-wrote
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatal("the drain did not end after the write")
	}
}

// TestStdioSessionOutlivesLastWrite: at EOF the session lasts until the
// last answer is written out: stdout is not closed under a write in
// progress (a real pipe would lose the rest of the answer). The drain
// (above) and the SDK (which closes a connection only once its answers
// are written) both hold to this.
func TestStdioSessionOutlivesLastWrite(t *testing.T) {
	in := io.NopCloser(strings.NewReader(strings.Join([]string{
		`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":"p","method":"ping"}`,
	}, "\n") + "\n"))
	out := &slowOut{entered: make(chan struct{}), release: make(chan struct{}), closed: make(chan struct{})}
	s := NewServer(Options{Manager: sandbox.NewManager(sandbox.ManagerOptions{}), Dir: t.TempDir()})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		r, w := stdio(ctx, in, out)
		done <- serveIO(ctx, s, r, w)
	}()
	select {
	case <-out.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the ping was not answered")
	}
	select {
	case err := <-done:
		t.Errorf("the session ended (%v) while its last answer was still being written", err)
	case <-out.closed:
		t.Errorf("stdout was closed while the last answer was still being written")
	case <-time.After(300 * time.Millisecond):
	}
	close(out.release)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end after its last answer")
	}
	if !strings.Contains(out.String(), `"id":"p"`) {
		t.Errorf("no answer to the ping:\n%s", out.String())
	}
}

// Package client is the Go client of the agentkernel HTTP API
// (`agentkernel serve`): one method per route, Server-Sent Events of
// POST /run/stream as an iterator, and errors typed by status (*APIError).
//
//	c := client.New() // $AGENTKERNEL_BASE_URL, $AGENTKERNEL_API_KEY
//	out, err := c.Run(ctx, []string{"python3", "-c", "print(1)"}, nil)
//	var ae *client.APIError
//	if errors.As(err, &ae) && ae.ExitCode != nil { … *ae.ExitCode, ae.Output … }
//
// A server on a unix socket (`agentkernel serve --unix PATH`, or the
// daemon's <data-dir>/daemon/api.sock) is reached with the base URL
// unix:///path/to.sock (AGENTKERNEL_BASE_URL or WithBaseURL) or
// WithUnixSocket. The server's own user needs no API key there, except
// from inside a sandbox (another user or PID namespace), so a key, when
// the client has one, is sent there too; other users are refused. Such
// a client only ever dials the socket: an HTTP client whose transport
// cannot be made to dial it is an error, never a TCP request.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// DefaultBaseURL is where `agentkernel serve` listens by default.
const DefaultBaseURL = "http://localhost:18888"

// unixHost is the Host of requests sent over a unix socket (the server
// does not check it there).
const unixHost = "http://agentkernel"

// UserAgent is sent with every request.
const UserAgent = "agentkernel-go-client/0.1"

// Client talks to one agentkernel server. It is safe for concurrent use.
type Client struct {
	baseURL string
	apiKey  string
	hc      *http.Client
	// unix: the server is on the unix socket at socket.
	unix   bool
	socket string
	// err, when set, is returned by every request: a configuration that
	// cannot be served as asked.
	err error
}

// Option configures a Client.
type Option func(*Client)

// WithBaseURL sets the server's address (default $AGENTKERNEL_BASE_URL,
// else http://localhost:18888): http://host:port, or unix:///path/to.sock
// for a server on a unix socket.
func WithBaseURL(u string) Option { return func(c *Client) { c.setBaseURL(u) } }

// WithUnixSocket talks to a server on the unix socket at path (as
// WithBaseURL("unix://" + path)).
func WithUnixSocket(path string) Option {
	return func(c *Client) { c.baseURL, c.unix, c.socket = unixHost, true, path }
}

func (c *Client) setBaseURL(u string) {
	if p, ok := strings.CutPrefix(u, "unix://"); ok {
		c.baseURL, c.unix, c.socket = unixHost, true, p
		return
	}
	c.baseURL, c.unix, c.socket = strings.TrimRight(u, "/"), false, ""
}

// WithAPIKey sets the API key (default $AGENTKERNEL_API_KEY).
func WithAPIKey(k string) Option { return func(c *Client) { c.apiKey = k } }

// WithHTTPClient replaces the HTTP client (timeouts, transports). With a
// unix socket base URL the client's Transport must be nil or an
// *http.Transport, of which a copy that dials the socket (and nothing
// else) is used; with any other RoundTripper every request fails
// (ErrUnixTransport), since it could only send it over TCP.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.hc = h } }

// WithTimeout bounds each request (none by default: pass a context with a
// deadline, since commands may run long).
func WithTimeout(d time.Duration) Option {
	return func(c *Client) {
		h := *c.hc
		h.Timeout = d
		c.hc = &h
	}
}

// New returns a Client configured from the environment and opts.
func New(opts ...Option) *Client {
	c := &Client{baseURL: DefaultBaseURL, apiKey: os.Getenv("AGENTKERNEL_API_KEY"), hc: &http.Client{}}
	if u := os.Getenv("AGENTKERNEL_BASE_URL"); u != "" {
		c.setBaseURL(u)
	}
	for _, o := range opts {
		o(c)
	}
	if c.unix {
		c.hc, c.err = unixClient(c.hc, c.socket)
	}
	return c
}

// ErrUnixTransport is the error of every request of a Client for a unix
// socket whose HTTP client has a Transport other than an *http.Transport
// (WithHTTPClient).
var ErrUnixTransport = errors.New("a unix socket base URL needs an http.Client whose Transport is nil or an *http.Transport")

// unixClient is a copy of hc whose transport dials the unix socket, and
// nothing else.
func unixClient(hc *http.Client, socket string) (*http.Client, error) {
	if socket == "" {
		return hc, errors.New("agentkernel: unix:// base URL without a socket path (unix:///path/to.sock)")
	}
	var t *http.Transport
	switch rt := hc.Transport.(type) {
	case nil:
		t = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		t = rt.Clone()
	default:
		return hc, fmt.Errorf("agentkernel: %w (got %T)", ErrUnixTransport, rt)
	}
	t.Proxy = nil
	t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}
	// No other dialer: a TLS dialer of the copied transport would be
	// used for an https URL (a redirect) instead of the socket.
	t.DialTLSContext, t.DialTLS = nil, nil
	h := *hc
	h.Transport = t
	return &h, nil
}

// Sentinel errors an *APIError matches with errors.Is, by status.
var (
	ErrBadRequest   = errors.New("bad request")       // 400
	ErrUnauthorized = errors.New("unauthorized")      // 401
	ErrForbidden    = errors.New("forbidden")         // 403
	ErrNotFound     = errors.New("not found")         // 404
	ErrConflict     = errors.New("conflict")          // 409: exists, not running, non-zero exit
	ErrTooLarge     = errors.New("request too large") // 413
	ErrServer       = errors.New("server error")      // 5xx
	// ErrBadAnswer is an answer that is not the API's envelope.
	ErrBadAnswer = errors.New("unexpected answer")
)

// APIError is a failure the server answered with.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Message is the server's error text.
	Message string
	// ExitCode and Output are set when a command exited non-zero (409).
	ExitCode *int
	Output   string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("agentkernel: %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// Is matches the sentinel errors by status.
func (e *APIError) Is(target error) bool {
	switch e.Status {
	case 400:
		return target == ErrBadRequest
	case 401:
		return target == ErrUnauthorized
	case 403:
		return target == ErrForbidden
	case 404:
		return target == ErrNotFound
	case 409:
		return target == ErrConflict
	case 413:
		return target == ErrTooLarge
	}
	if e.Status >= 500 {
		return target == ErrServer
	}
	return false
}

// envelope is every JSON answer.
type envelope struct {
	Success  bool            `json:"success"`
	Data     json.RawMessage `json:"data"`
	Error    string          `json:"error"`
	ExitCode *int            `json:"exit_code"`
	Output   string          `json:"output"`
}

// do sends one request and decodes data into out (when not nil).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	resp, err := c.send(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("agentkernel: reading the answer: %w", err)
	}
	return decodeAnswer(resp.StatusCode, b, out)
}

func decodeAnswer(status int, b []byte, out any) error {
	var env envelope
	jerr := json.Unmarshal(b, &env)
	if status >= 400 {
		ae := &APIError{Status: status, Message: strings.TrimSpace(string(b))}
		if jerr == nil && env.Error != "" {
			ae.Message, ae.ExitCode, ae.Output = env.Error, env.ExitCode, env.Output
		}
		return ae
	}
	if jerr != nil {
		return fmt.Errorf("agentkernel: %w: %v", ErrBadAnswer, jerr)
	}
	if !env.Success {
		return &APIError{Status: status, Message: env.Error}
	}
	if out != nil {
		if len(env.Data) == 0 {
			return fmt.Errorf("agentkernel: %w: no data", ErrBadAnswer)
		}
		if err := json.Unmarshal(env.Data, out); err != nil {
			return fmt.Errorf("agentkernel: decoding data: %w", err)
		}
	}
	return nil
}

func (c *Client) send(ctx context.Context, method, path string, query url.Values, body any) (*http.Response, error) {
	if c.err != nil {
		return nil, c.err
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := c.baseURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", UserAgent)
	// Sent over a unix socket too: the server wants it there from its
	// own user's processes in other namespaces (inside a sandbox).
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	return c.hc.Do(req)
}

// sandboxPath is /sandboxes/NAME plus more, NAME escaped.
func sandboxPath(name string, more ...string) string {
	p := "/sandboxes/" + url.PathEscape(name)
	for _, m := range more {
		p += "/" + m
	}
	return p
}

// filePath is the files route of an absolute sandbox path, each segment
// escaped.
func filePath(name, p string) string {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return sandboxPath(name, "files", strings.Join(parts, "/"))
}

package client

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"time"
	"unicode/utf8"
)

// Status is GET /status.
type Status struct {
	Version          string `json:"version"`
	Backend          string `json:"backend"`
	APIKeyConfigured bool   `json:"api_key_configured"`
}

// Stats is GET /stats.
type Stats struct {
	SandboxCount  int    `json:"sandbox_count"`
	SandboxLimit  int    `json:"sandbox_limit"`
	Backend       string `json:"backend"`
	UptimeSeconds int64  `json:"uptime_seconds"`
	Version       string `json:"version"`
	ResourceUsage struct {
		CPUPercent    float64 `json:"cpu_percent"`
		MemoryUsedMB  int64   `json:"memory_used_mb"`
		MemoryTotalMB int64   `json:"memory_total_mb"`
		DiskUsedMB    int64   `json:"disk_used_mb"`
	} `json:"resource_usage"`
}

// SandboxInfo is a persistent sandbox.
type SandboxInfo struct {
	Name    string `json:"name"`
	Status  string `json:"status"` // "running" or "stopped"
	Backend string `json:"backend"`
	UUID    string `json:"uuid,omitempty"`
	Image   string `json:"image,omitempty"`
	// RequestedImage is the image that was asked for when Image is
	// "host" instead (it could not be had: the sandbox runs the host's
	// tools); empty otherwise.
	RequestedImage string            `json:"requested_image,omitempty"`
	VCPUs          int               `json:"vcpus,omitempty"`
	MemoryMB       int               `json:"memory_mb,omitempty"`
	CreatedAt      string            `json:"created_at,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	Description    string            `json:"description,omitempty"`
	IP             string            `json:"ip,omitempty"`
	ExpiresAt      string            `json:"expires_at,omitempty"`
}

// RunOptions are the optional fields of /run and /run/stream.
type RunOptions struct {
	Image   string `json:"image,omitempty"`
	Profile string `json:"profile,omitempty"`
	// Fast asks for a warm sandbox (server default: true).
	Fast *bool `json:"fast,omitempty"`
}

type runBody struct {
	Command []string `json:"command"`
	RunOptions
}

func runRequest(cmd []string, o *RunOptions) runBody {
	b := runBody{Command: cmd}
	if o != nil {
		b.RunOptions = *o
	}
	return b
}

type outputData struct {
	Output string `json:"output"`
}

// Health is GET /health: "ok".
func (c *Client) Health(ctx context.Context) (string, error) {
	var s string
	err := c.do(ctx, http.MethodGet, "/health", nil, nil, &s)
	return s, err
}

// Status is GET /status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var s Status
	if err := c.do(ctx, http.MethodGet, "/status", nil, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Stats is GET /stats.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	var s Stats
	if err := c.do(ctx, http.MethodGet, "/stats", nil, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Run runs cmd in a fresh sandbox and returns its output (stdout and
// stderr interleaved). A non-zero exit is an *APIError with Status 409,
// ExitCode and Output.
func (c *Client) Run(ctx context.Context, cmd []string, o *RunOptions) (string, error) {
	var d outputData
	err := c.do(ctx, http.MethodPost, "/run", nil, runRequest(cmd, o), &d)
	return d.Output, err
}

// BatchCommand is one command of BatchRun.
type BatchCommand struct {
	Command []string `json:"command"`
	RunOptions
}

// BatchResult is one command's outcome: Output or Error.
type BatchResult struct {
	Output *string `json:"output"`
	Error  *string `json:"error"`
}

// BatchRun runs the commands concurrently, results in input order.
func (c *Client) BatchRun(ctx context.Context, cmds []BatchCommand) ([]BatchResult, error) {
	var d struct {
		Results []BatchResult `json:"results"`
	}
	err := c.do(ctx, http.MethodPost, "/batch/run", nil, map[string]any{"commands": cmds}, &d)
	return d.Results, err
}

// ListSandboxes lists the sandboxes carrying all the given labels.
func (c *Client) ListSandboxes(ctx context.Context, labels map[string]string) ([]SandboxInfo, error) {
	q := url.Values{}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q.Add("label", k+":"+labels[k])
	}
	var out []SandboxInfo
	err := c.do(ctx, http.MethodGet, "/sandboxes", q, nil, &out)
	return out, err
}

// CreateOptions describe a new persistent sandbox.
type CreateOptions struct {
	Name        string            `json:"name"`
	Image       string            `json:"image,omitempty"`
	VCPUs       int               `json:"vcpus,omitempty"`
	MemoryMB    int               `json:"memory_mb,omitempty"`
	Profile     string            `json:"profile,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Description string            `json:"description,omitempty"`
}

// CreateSandbox creates and starts a persistent sandbox.
func (c *Client) CreateSandbox(ctx context.Context, o CreateOptions) (*SandboxInfo, error) {
	var s SandboxInfo
	if err := c.do(ctx, http.MethodPost, "/sandboxes", nil, o, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// GetSandbox returns one sandbox (ErrNotFound).
func (c *Client) GetSandbox(ctx context.Context, name string) (*SandboxInfo, error) {
	var s SandboxInfo
	if err := c.do(ctx, http.MethodGet, sandboxPath(name), nil, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// UpdateOptions change a sandbox's metadata; nil fields stay. Labels
// replace the whole map.
type UpdateOptions struct {
	Labels      *map[string]string `json:"labels,omitempty"`
	Description *string            `json:"description,omitempty"`
}

// UpdateSandbox is PATCH /sandboxes/{name}.
func (c *Client) UpdateSandbox(ctx context.Context, name string, o UpdateOptions) (*SandboxInfo, error) {
	var s SandboxInfo
	if err := c.do(ctx, http.MethodPatch, sandboxPath(name), nil, o, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// RemoveSandbox stops and removes a sandbox (ErrNotFound).
func (c *Client) RemoveSandbox(ctx context.Context, name string) error {
	var s string
	return c.do(ctx, http.MethodDelete, sandboxPath(name), nil, nil, &s)
}

// StartSandbox starts a stopped sandbox.
func (c *Client) StartSandbox(ctx context.Context, name string) error {
	var s string
	return c.do(ctx, http.MethodPost, sandboxPath(name, "start"), nil, nil, &s)
}

// StopSandbox stops a running sandbox; its files stay.
func (c *Client) StopSandbox(ctx context.Context, name string) error {
	var s string
	return c.do(ctx, http.MethodPost, sandboxPath(name, "stop"), nil, nil, &s)
}

// ExecOptions are the optional fields of Exec.
type ExecOptions struct {
	Env     []string `json:"env,omitempty"` // KEY=VALUE
	Workdir string   `json:"workdir,omitempty"`
	Sudo    bool     `json:"sudo,omitempty"`
	// TimeoutMS > 0 kills the command after that many milliseconds: a
	// 409 *APIError with ExitCode 124.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// Exec runs cmd in a running sandbox and returns its output; a non-zero
// exit is a 409 *APIError with ExitCode and Output.
func (c *Client) Exec(ctx context.Context, name string, cmd []string, o *ExecOptions) (string, error) {
	body := struct {
		Command []string `json:"command"`
		ExecOptions
	}{Command: cmd}
	if o != nil {
		body.ExecOptions = *o
	}
	var d outputData
	err := c.do(ctx, http.MethodPost, sandboxPath(name, "exec"), nil, body, &d)
	return d.Output, err
}

// File is a file read from a sandbox.
type File struct {
	Content  string `json:"content"`
	Encoding string `json:"encoding"` // "utf8" or "base64"
	Size     int64  `json:"size"`
}

// Bytes is the file's content, decoded.
func (f *File) Bytes() ([]byte, error) {
	if f.Encoding == "base64" {
		return base64.StdEncoding.DecodeString(f.Content)
	}
	return []byte(f.Content), nil
}

// ReadFile reads the file at the absolute path p.
func (c *Client) ReadFile(ctx context.Context, name, p string) (*File, error) {
	var f File
	if err := c.do(ctx, http.MethodGet, filePath(name, p), nil, nil, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// WriteFile writes data to the absolute path p (parents created); data
// that is not UTF-8 travels as base64.
func (c *Client) WriteFile(ctx context.Context, name, p string, data []byte) error {
	body := map[string]string{"content": string(data), "encoding": "utf8"}
	if !utf8.Valid(data) {
		body["content"], body["encoding"] = base64.StdEncoding.EncodeToString(data), "base64"
	}
	var s string
	return c.do(ctx, http.MethodPut, filePath(name, p), nil, body, &s)
}

// DeleteFile removes the file at the absolute path p.
func (c *Client) DeleteFile(ctx context.Context, name, p string) error {
	var s string
	return c.do(ctx, http.MethodDelete, filePath(name, p), nil, nil, &s)
}

// WriteFiles writes several UTF-8 files (absolute path → content) and
// returns how many were written.
func (c *Client) WriteFiles(ctx context.Context, name string, files map[string]string) (int, error) {
	var msg string // "Wrote N file(s)"
	if err := c.do(ctx, http.MethodPost, sandboxPath(name, "files"), nil, map[string]any{"files": files}, &msg); err != nil {
		return 0, err
	}
	var n int
	if _, err := fmt.Sscanf(msg, "Wrote %d file", &n); err != nil {
		return 0, fmt.Errorf("%w: %q", ErrBadAnswer, msg)
	}
	return n, nil
}

// LogEntry is one audit entry of a sandbox (fields as the server sends
// them: time, action, command, exit_code, who, …).
type LogEntry map[string]any

// Logs returns a sandbox's audit entries, oldest first.
func (c *Client) Logs(ctx context.Context, name string) ([]LogEntry, error) {
	var out []LogEntry
	err := c.do(ctx, http.MethodGet, sandboxPath(name, "logs"), nil, nil, &out)
	return out, err
}

// Extend pushes a sandbox's expiry back by d ("1h", "30m") and returns
// the new expiry (nil when the server reports none).
func (c *Client) Extend(ctx context.Context, name, by string) (*time.Time, error) {
	var d struct {
		ExpiresAt *string `json:"expires_at"`
	}
	if err := c.do(ctx, http.MethodPost, sandboxPath(name, "extend"), nil, map[string]string{"by": by}, &d); err != nil {
		return nil, err
	}
	if d.ExpiresAt == nil {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *d.ExpiresAt)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// GCResult is POST /gc.
type GCResult struct {
	Removed []string `json:"removed"`
	Count   int      `json:"count"`
}

// GC removes expired sandboxes and leftovers.
func (c *Client) GC(ctx context.Context) (*GCResult, error) {
	var r GCResult
	if err := c.do(ctx, http.MethodPost, "/gc", nil, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// WithSandbox creates and starts a sandbox, calls fn, and always removes
// the sandbox afterwards (also when fn fails or panics); the removal uses
// a fresh context so that a cancelled ctx still cleans up.
func (c *Client) WithSandbox(ctx context.Context, o CreateOptions, fn func(ctx context.Context, sb *SandboxInfo) error) (err error) {
	sb, err := c.CreateSandbox(ctx, o)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if rerr := c.RemoveSandbox(rctx, sb.Name); rerr != nil && !errors.Is(rerr, ErrNotFound) {
			err = errors.Join(err, rerr)
		}
	}()
	return fn(ctx, sb)
}

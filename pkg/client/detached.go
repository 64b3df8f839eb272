package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// DetachedCommand is a command started with ExecDetached: it runs on in
// the sandbox, owned by the sandbox's supervisor, whatever happens to
// the client that started it.
type DetachedCommand struct {
	ID      string   `json:"id"`
	Sandbox string   `json:"sandbox"`
	Command []string `json:"command"`
	Pid     int      `json:"pid"`
	// Status is "running", "completed" (exit code 0) or "failed".
	Status string `json:"status"`
	// ExitCode is set once it ended (128+N for signal N).
	ExitCode    *int   `json:"exit_code"`
	StartedAt   string `json:"started_at"`
	FinishedAt  string `json:"finished_at,omitempty"`
	Reason      string `json:"reason,omitempty"`
	StdoutBytes int64  `json:"stdout_bytes"`
	StderrBytes int64  `json:"stderr_bytes"`
}

func detachedPath(name string, more ...string) string {
	return sandboxPath(name, append([]string{"exec", "detached"}, more...)...)
}

// ExecDetached starts cmd in a running sandbox and returns at once; the
// command runs on (o: env, workdir, sudo, timeout_ms).
func (c *Client) ExecDetached(ctx context.Context, name string, cmd []string, o *ExecOptions) (*DetachedCommand, error) {
	body := struct {
		Command []string `json:"command"`
		ExecOptions
	}{Command: cmd}
	if o != nil {
		body.ExecOptions = *o
	}
	var d DetachedCommand
	if err := c.do(ctx, http.MethodPost, sandboxPath(name, "exec", "detach"), nil, body, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// DetachedList lists a sandbox's detached commands, oldest first.
func (c *Client) DetachedList(ctx context.Context, name string) ([]DetachedCommand, error) {
	var ds []DetachedCommand
	err := c.do(ctx, http.MethodGet, detachedPath(name), nil, nil, &ds)
	return ds, err
}

// DetachedStatus describes detached command id.
func (c *Client) DetachedStatus(ctx context.Context, name, id string) (*DetachedCommand, error) {
	var d DetachedCommand
	if err := c.do(ctx, http.MethodGet, detachedPath(name, url.PathEscape(id)), nil, nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// DetachedLogs returns stream ("stdout" or "stderr"; "" is stdout) of
// detached command id from byte offset on. An offset past the end is a
// 416 *APIError.
func (c *Client) DetachedLogs(ctx context.Context, name, id, stream string, offset int64) (string, error) {
	if stream == "" {
		stream = "stdout"
	}
	q := url.Values{}
	if stream != "stdout" {
		q.Set("stream", stream)
	}
	if offset != 0 {
		q.Set("offset", strconv.FormatInt(offset, 10))
	}
	var d map[string]string
	if err := c.do(ctx, http.MethodGet, detachedPath(name, url.PathEscape(id), "logs"), q, nil, &d); err != nil {
		return "", err
	}
	return d[stream], nil
}

// DetachedKill kills detached command id.
func (c *Client) DetachedKill(ctx context.Context, name, id string) error {
	var s string
	return c.do(ctx, http.MethodDelete, detachedPath(name, url.PathEscape(id)), nil, nil, &s)
}

// GetSandboxByUUID returns the sandbox whose UUID is id.
func (c *Client) GetSandboxByUUID(ctx context.Context, id string) (*SandboxInfo, error) {
	var s SandboxInfo
	if err := c.do(ctx, http.MethodGet, "/sandboxes/by-uuid/"+url.PathEscape(id), nil, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

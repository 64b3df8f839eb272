package client

import (
	"context"
	"net/http"
	"net/url"
)

// Snapshot is a snapshot of a persistent sandbox's files.
type Snapshot struct {
	Name      string `json:"name"`
	Sandbox   string `json:"sandbox"`
	Backend   string `json:"backend"`
	BaseImage string `json:"base_image,omitempty"`
	VCPUs     int    `json:"vcpus,omitempty"`
	MemoryMB  int    `json:"memory_mb,omitempty"`
	// Layers is how many read-only layers a restored sandbox stacks.
	Layers    int    `json:"layers"`
	CreatedAt string `json:"created_at"`
	// Memory: the snapshot holds the sandbox's memory too (its detached
	// commands resume at a restored sandbox's first start).
	Memory bool `json:"memory,omitempty"`
}

func snapshotPath(name string, more ...string) string {
	p := "/snapshots/" + url.PathEscape(name)
	for _, m := range more {
		p += "/" + m
	}
	return p
}

// ListSnapshots is GET /snapshots: every snapshot, oldest first.
func (c *Client) ListSnapshots(ctx context.Context) ([]Snapshot, error) {
	var out []Snapshot
	if err := c.do(ctx, http.MethodGet, "/snapshots", nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// TakeSnapshot is POST /snapshots: snapshots the sandbox as name (""
// for the server's default, <sandbox>-YYYYMMDD). A running sandbox is
// frozen while its files are copied.
func (c *Client) TakeSnapshot(ctx context.Context, sandbox, name string) (*Snapshot, error) {
	return c.takeSnapshot(ctx, sandbox, name, false)
}

// TakeMemorySnapshot is POST /snapshots with "memory": true: the
// running sandbox's memory too (gvisor sandboxes without a network; its
// detached commands resume at the first start of a sandbox restored
// from it). Elsewhere the server answers 400 (ErrBadRequest).
func (c *Client) TakeMemorySnapshot(ctx context.Context, sandbox, name string) (*Snapshot, error) {
	return c.takeSnapshot(ctx, sandbox, name, true)
}

func (c *Client) takeSnapshot(ctx context.Context, sandbox, name string, memory bool) (*Snapshot, error) {
	body := struct {
		Sandbox string `json:"sandbox"`
		Name    string `json:"name,omitempty"`
		Memory  bool   `json:"memory,omitempty"`
	}{sandbox, name, memory}
	var s Snapshot
	if err := c.do(ctx, http.MethodPost, "/snapshots", nil, body, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// GetSnapshot is GET /snapshots/{name}.
func (c *Client) GetSnapshot(ctx context.Context, name string) (*Snapshot, error) {
	var s Snapshot
	if err := c.do(ctx, http.MethodGet, snapshotPath(name), nil, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// DeleteSnapshot is DELETE /snapshots/{name}.
func (c *Client) DeleteSnapshot(ctx context.Context, name string) error {
	var s string
	return c.do(ctx, http.MethodDelete, snapshotPath(name), nil, nil, &s)
}

// RestoreSnapshot is POST /snapshots/{name}/restore: a new, stopped
// sandbox called as ("" for <sandbox>-restored) with the snapshot's
// files. A taken name is an *APIError with Status 409.
func (c *Client) RestoreSnapshot(ctx context.Context, name, as string) (*SandboxInfo, error) {
	body := struct {
		AsName string `json:"as_name,omitempty"`
	}{as}
	var s SandboxInfo
	if err := c.do(ctx, http.MethodPost, snapshotPath(name, "restore"), nil, body, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

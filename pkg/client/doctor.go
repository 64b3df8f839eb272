package client

import (
	"context"
	"net/http"
)

// DoctorCheck is one capability the server's host was checked for.
type DoctorCheck struct {
	Name    string `json:"name"`
	Status  string `json:"status"` // ok, warning, info or error
	Message string `json:"message"`
	Enables string `json:"enables,omitempty"`
	Fix     string `json:"fix,omitempty"`
}

// DoctorReport is GET /doctor's answer: the checks, then what runs on
// that host get.
type DoctorReport struct {
	Checks    []DoctorCheck `json:"checks"`
	Healthy   bool          `json:"healthy"`
	Backend   string        `json:"backend,omitempty"`
	Rootless  bool          `json:"rootless,omitempty"`
	Isolation string        `json:"isolation,omitempty"` // full, degraded or refused
	Degraded  []string      `json:"degraded,omitempty"`
	Refused   []string      `json:"refused,omitempty"`
}

// Doctor is GET /doctor: the server host's capabilities and the
// isolation its runs get. An unhealthy host is still a 200 (Healthy
// false), not an error.
func (c *Client) Doctor(ctx context.Context) (*DoctorReport, error) {
	var out DoctorReport
	if err := c.do(ctx, http.MethodGet, "/doctor", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

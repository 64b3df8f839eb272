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
	// Contract lists, per backend, the checks every backend is held to
	// that it is known not to pass as native does, with why.
	Contract []BackendContract `json:"contract,omitempty"`
}

// BackendContract is one backend's known differences from the checks
// every backend runs (the attack battery, the file and cp tests, the
// HTTP API contract).
type BackendContract struct {
	Backend     string               `json:"backend"`
	Differences []ContractDifference `json:"differences"`
}

// ContractDifference is one check a backend does not pass as native
// does.
type ContractDifference struct {
	Backend  string   `json:"backend"`
	Suite    string   `json:"suite"` // attack, files or api
	Check    string   `json:"check"`
	Profiles []string `json:"profiles,omitempty"` // absent: every profile
	Want     string   `json:"want"`
	Why      string   `json:"why"`
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

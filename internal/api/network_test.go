package api

import (
	"encoding/json"
	"testing"

	"github.com/agentkernel/agentkernel/internal/config"
)

func TestNetworkField(t *testing.T) {
	for in, want := range map[string]config.NetworkSetting{
		`{}`:                     "",
		`{"network":null}`:       "",
		`{"network":true}`:       config.NetworkOn,
		`{"network":false}`:      config.NetworkOff,
		`{"network":"filtered"}`: config.NetworkFiltered,
		`{"network":"FULL"}`:     config.NetworkAll,
		`{"network":"none"}`:     config.NetworkOff,
	} {
		var q runRequest
		if err := json.Unmarshal([]byte(in), &q); err != nil || q.Network.set != want {
			t.Errorf("%s: %q %v, want %q", in, q.Network.set, err, want)
		}
	}
	for _, in := range []string{`{"network":1}`, `{"network":"open"}`, `{"network":["full"]}`, `{"network":{}}`} {
		var q runRequest
		if err := json.Unmarshal([]byte(in), &q); err == nil {
			t.Errorf("%s: accepted as %q", in, q.Network.set)
		}
	}
}

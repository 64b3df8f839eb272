package api

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
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

// TestPoolKeyHasNetwork: the network policy is part of a warm pool's key,
// so a pooled sandbox never serves a request with another policy.
func TestPoolKeyHasNetwork(t *testing.T) {
	base := sandbox.Spec{Image: "alpine:3.20", Args: []string{"true"}, Network: sandbox.Network{Mode: sandbox.NetworkFiltered, AllowDomains: []string{"a.example"}}}
	key := func(mut func(*sandbox.Spec)) string {
		s := base
		s.Network.AllowDomains = slices.Clone(base.Network.AllowDomains)
		mut(&s)
		k, err := poolKey(&s)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	k0 := key(func(*sandbox.Spec) {})
	if key(func(s *sandbox.Spec) { s.Args = []string{"other"} }) != k0 {
		t.Error("the command changed the pool key")
	}
	for name, mut := range map[string]func(*sandbox.Spec){
		"mode":  func(s *sandbox.Spec) { s.Network.Mode = sandbox.NetworkFull },
		"allow": func(s *sandbox.Spec) { s.Network.AllowDomains = []string{"b.example"} },
		"block": func(s *sandbox.Spec) { s.Network.BlockDomains = []string{"c.example"} },
		"cidr":  func(s *sandbox.Spec) { s.Network.AllowCIDRs = []string{"10.0.0.0/8"} },
		"udp":   func(s *sandbox.Spec) { s.Network.AllowUDP = []string{"10.0.0.1:53"} },
		"ports": func(s *sandbox.Spec) { s.Network.Ports = []sandbox.PortMapping{{HostPort: 8080, SandboxPort: 80}} },
		"none":  func(s *sandbox.Spec) { s.Network = sandbox.Network{Mode: sandbox.NetworkNone} },
	} {
		if key(mut) == k0 {
			t.Errorf("%s: a different network policy has the same pool key", name)
		}
	}
}

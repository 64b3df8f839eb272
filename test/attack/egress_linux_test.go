//go:build linux

package attack

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/testenv"
	"github.com/agentkernel/agentkernel/internal/testenv/netlab"
)

// modeEgress is the root battery of the network probes with egress on
// (--network full in every profile), run in the client namespace of a
// netlab so that the host a sandbox attacks is a namespace of the test.
const modeEgress = "root-egress"

// netHelper is the agentkernel-full binary that serves the egress
// battery's sandboxes' network ("": the backend's default, which a test
// binary does not have).
var netHelper string

// Environment of the egress battery's inner process.
const envNetHelper = "ATTACK_NET_HELPER"

// egressProbes are the probes the egress battery runs: every probe that
// aims at the network or at sockets of the host.
var egressProbes = []string{
	"abstract_unix", "cloud_metadata", "egress_bypass", "host_unix_socket",
	"net_egress", "net_host_loopback", "packet_socket", "raw_socket", "udp_egress",
}

func egressSetting(mode string) config.NetworkSetting {
	if mode == modeEgress {
		return config.NetworkAll
	}
	return config.NetworkUnset
}

// TestAttackEgress runs the network probes in sandboxes with egress on:
// this test binary again, in a netlab's client namespace (its "host",
// whose own addresses the fixtures' listeners hold), where the lab's
// internet holds a metadata server and private servers that must see
// nothing.
func TestAttackEgress(t *testing.T) {
	if os.Getenv(envInner) != "" {
		t.Skip("inner process of another variant")
	}
	testenv.RequireRoot(t)
	lab := netlab.New(t)
	probes := buildProbes(t)
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "agentkernel-full"), "github.com/agentkernel/agentkernel/cmd/agentkernel-full")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building agentkernel-full: %v\n%s", err, out)
	}
	self, err := os.Executable()
	must(t, err)
	only := egressProbes
	if o := os.Getenv("ATTACK_ONLY"); o != "" {
		only = nil
		for _, p := range strings.Split(o, ",") {
			for _, e := range egressProbes {
				if p == e {
					only = append(only, p)
				}
			}
		}
		if len(only) == 0 {
			t.Skip("ATTACK_ONLY names no network probe")
		}
	}
	out := filepath.Join(dir, "results.json")
	cmd := lab.Command(t.Context(), self, "-test.run=^TestAttackEgressInner$", "-test.v", "-test.timeout=360s")
	cmd.Env = append(cmd.Env, envInner+"=egress", envOut+"="+out, envProbes+"="+probes,
		envNetHelper+"="+filepath.Join(dir, "agentkernel-full"), "ATTACK_ONLY="+strings.Join(only, ","))
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	runErr := cmd.Run()
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "--- ") || strings.Contains(l, "_test.go") || strings.Contains(l, "panic") {
			t.Log("egress: " + l)
		}
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the egress battery produced no results (%v):\n%s", runErr, lastLines(buf.String(), 40))
	}
	var res modeResults
	must(t, json.Unmarshal(data, &res))
	if len(res.Outcomes) != len(only) {
		t.Errorf("the egress battery ran %d probes, want %d", len(res.Outcomes), len(only))
	}
	assertResults(t, &res)
	t.Logf("egress battery: %v", res.Took)
	// Whatever the probes concluded, nothing of theirs arrived at the
	// lab's metadata and private servers (a full-mode sandbox may reach
	// private addresses by policy, but no probe aims there).
	for _, a := range []string{netlab.Metadata4, netlab.Metadata6, netlab.MetadataAl, netlab.Gateway4, netlab.Gateway6, netlab.DNS4, netlab.DNS6} {
		if lab.Reached(a) {
			t.Errorf("a connection or datagram from the egress battery arrived at the lab's %s", a)
		}
	}
}

// TestAttackEgressInner is the egress battery in the lab's client
// namespace; it writes its results as JSON for TestAttackEgress.
func TestAttackEgressInner(t *testing.T) {
	if os.Getenv(envInner) != "egress" {
		t.Skip("runs only as the inner process of TestAttackEgress")
	}
	netHelper = os.Getenv(envNetHelper)
	res := battery(t, modeEgress, os.Getenv(envProbes), nil)
	b, err := json.Marshal(res)
	must(t, err)
	must(t, os.WriteFile(os.Getenv(envOut), b, 0o644))
}

//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/contract"
)

// TestNomadServeContract: `serve` with [sandbox] backend = "nomad" and
// a real Nomad dev agent, whose raw_exec tasks run this tree's
// agentkernel-full as the node's (with a data directory of its own): the
// HTTP API suite's cases (apiContractCases, through pkg/client and raw
// requests) and the Node SDK script's (nodeSDKCases), held to
// internal/contract's nomad rows, with each run and
// persistent sandbox a job on the agent; then what only Nomad shows: a
// running sandbox is a job of the agent, a snapshot is refused as the
// API refuses what a backend cannot do, and no job is left.
func TestNomadServeContract(t *testing.T) {
	sdkDir := installNodeSDK(t)
	l, full, nodeData := startNomadNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	a, ref := withRegistry(t)
	cfg := fmt.Sprintf("[sandbox]\nbackend = \"nomad\"\n[orchestrator]\nnomad_addr = %q\nnomad_agentkernel_path = %q\nnomad_node_data_dir = %q\n", l.Address, full, nodeData)
	p := filepath.Join(a.home, ".config", "agentkernel", "config.toml")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// A project's agentkernel.toml (the server's working directory)
	// cannot choose the cluster: its [orchestrator] is not read.
	if err := os.WriteFile(filepath.Join(a.dir, "agentkernel.toml"), []byte("[orchestrator]\nnomad_addr = \"http://127.0.0.1:1\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, a, "listening on ", "serve", "--port", "0", "--api-key", apiKey)
	if !strings.Contains(s.errb.String(), "backend nomad: Nomad at "+l.Address) {
		t.Errorf("serve did not say which cluster it serves:\n%s", s.errb.String())
	}
	// serve -B nomad over a --config file whose cluster does not answer:
	// refused at start, naming it.
	bad := filepath.Join(a.home, "bad.toml")
	if err := os.WriteFile(bad, []byte("[orchestrator]\nnomad_addr = \"http://127.0.0.1:1\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := a.run("serve", "-c", bad, "-B", "nomad", "--port", "0", "--api-key", apiKey); r.code != 125 || !strings.Contains(r.stderr, "no Nomad agent at http://127.0.0.1:1") {
		t.Errorf("serve -B nomad with no cluster: %v", r)
	}
	const name = "contract-api"
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", name) })
	jobs := func() []string {
		var list []struct {
			ID, Status string
		}
		resp, err := http.Get(l.Address + "/v1/jobs?prefix=agentkernel-")
		if err != nil {
			t.Errorf("nomad jobs: %v", err)
			return nil
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			t.Errorf("nomad jobs: %v", err)
		}
		var out []string
		for _, j := range list {
			out = append(out, j.ID+"="+j.Status)
		}
		return out
	}
	cases := apiContractCases(ctx, s, s.client(apiKey), ref, contract.Nomad, name)
	// While the persistent sandbox runs, it is a job of the agent.
	for k, c := range cases {
		if c.name != "sandbox create, exec and info" {
			continue
		}
		run := c.run
		cases[k].run = func() error {
			if err := run(); err != nil {
				return err
			}
			if js := jobs(); !strings.Contains(strings.Join(js, " "), "agentkernel-"+name+"=running") {
				return fmt.Errorf("the sandbox is no running job of the agent: %v", js)
			}
			r := s.raw("POST", "/snapshots", `{"sandbox":"`+name+`","name":"snap"}`)
			if r.status != http.StatusNotImplemented || !strings.Contains(string(r.body), "Nomad job") {
				return fmt.Errorf("a snapshot of a job's sandbox: %d %s", r.status, r.body)
			}
			return nil
		}
	}
	checkContract(t, contract.Nomad, contract.SuiteAPI, cases)
	// The official Node SDK's script, as TestNodeSDKContract runs it,
	// held to the same rows.
	if err := os.WriteFile(filepath.Join(sdkDir, "sdk.mjs"), []byte(nodeSDKScript), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range []string{"node-sdk", "node-snap"} {
			a.run("sandbox", "rm", "--force", n)
		}
	})
	sdk := runNodeSDKScript(t, sdkDir, s.url, ref)
	checkContract(t, contract.Nomad, contract.SuiteNodeSDK, nodeSDKContractCases(&sdk))
	// Runs and the removed sandbox leave no job.
	deadline := time.Now().Add(30 * time.Second)
	for {
		js := jobs()
		if len(js) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("jobs left on the agent: %v (the script's removals that failed: %q)\nserve:\n%s", js, sdk.RemoveErrors, s.errb.String())
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
}

//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNomadServeWarmPool: `serve` with [sandbox] backend = "nomad" and
// [daemon] min_warm = 1 against a real Nomad dev agent (its raw_exec
// tasks run this tree's agentkernel-full as the node's) fills the
// default image's pool at start with a pool job of the agent, answering;
// a POST /run is served from that job: its command runs in that job's
// sandbox on the node (a file it writes is read there through the node's
// agentkernel while it runs), no job of the run's own is registered, the
// job's claim names the server, and /metrics counts a hit, not a miss;
// the job is purged after and the pool refills with another job, which
// the next run takes; SIGTERM leaves no pool job on the agent.
func TestNomadServeWarmPool(t *testing.T) {
	l, full, nodeData := startNomadNode(t)

	a := newAK(t)
	cfg := fmt.Sprintf("[sandbox]\nbackend = \"nomad\"\nbase_image = \"host\"\n"+
		"[orchestrator]\nnomad_addr = %q\nnomad_agentkernel_path = %q\nnomad_node_data_dir = %q\n"+
		"[daemon]\nmin_warm = 1\nmax_warm = 1\n", l.Address, full, nodeData)
	p := filepath.Join(a.home, ".config", "agentkernel", "config.toml")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, a, "listening on ", "serve", "--port", "0", "--api-key", apiKey)

	// The agent's view: jobs by prefix, and a pool job's claim.
	type job struct {
		ID, Status string
		Stop       bool
		Meta       map[string]string
	}
	nomadGet := func(path string, v any) int {
		resp, err := http.Get(l.Address + path)
		if err != nil {
			t.Fatalf("nomad %s: %v", path, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK && v != nil {
			if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
				t.Fatalf("nomad %s: %v", path, err)
			}
		}
		return resp.StatusCode
	}
	jobs := func(prefix string) []job {
		var js []job
		nomadGet("/v1/jobs?meta=true&prefix="+prefix, &js)
		return js
	}
	claim := func(id string) map[string]string {
		var v struct{ Items map[string]string }
		if nomadGet("/v1/var/agentkernel/claims/"+strings.TrimPrefix(id, "agentkernel.pool-"), &v) != http.StatusOK {
			return nil
		}
		return v.Items
	}
	// waitingJob waits for the one pool job that runs, is claimed by no
	// one and is counted warm by the server, other than not.
	waitingJob := func(not string) job {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for {
			var w []job
			for _, j := range jobs("agentkernel.pool-") {
				if j.ID != not && j.Status == "running" && !j.Stop && claim(j.ID) == nil {
					w = append(w, j)
				}
			}
			if len(w) == 1 && metricSum(t, s, "agentkernel_pool_warm_sandboxes{") == 1 {
				return w[0]
			}
			if len(w) > 1 {
				t.Fatalf("max_warm 1, yet %d waiting pool jobs: %+v", len(w), w)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no waiting pool job (other than %q) counted warm: jobs %+v\nserve:\n%s", not, jobs("agentkernel"), s.errb.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	hits := func() int { return metricSum(t, s, `agentkernel_pool_runs_total{result="hit"}`) }
	misses := func() int { return metricSum(t, s, `agentkernel_pool_runs_total{result="miss"}`) }
	nodeExec := func(name string, args ...string) (string, error) {
		c := exec.Command(full, append([]string{"--data-dir", nodeData, "exec", name, "--"}, args...)...)
		out, err := c.Output()
		return string(out), err
	}

	// min_warm at start: the default image's pool holds a pool job of
	// the agent whose sandbox answers on the node.
	j1 := waitingJob("")
	node := j1.Meta["agentkernel.node-name"]
	if !strings.HasPrefix(node, "pool-") || j1.Meta["agentkernel.pool-owner"] == "" {
		t.Fatalf("pool job %s: meta %v", j1.ID, j1.Meta)
	}
	if out, err := nodeExec(node, "echo", "up"); err != nil || out != "up\n" {
		t.Fatalf("the pool job's sandbox %s on the node: %q %v", node, out, err)
	}

	// A run, served from j1.
	h0, m0 := hits(), misses()
	const token = "ran-in-the-pool-job"
	type runResp struct {
		status int
		body   string
		err    error
	}
	done := make(chan runResp, 1)
	go func() {
		body := `{"command":["sh","-c","echo ` + token + ` > /tmp/took; sleep 5; cat /tmp/took"]}`
		req, _ := http.NewRequest("POST", s.url+"/run", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- runResp{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- runResp{status: resp.StatusCode, body: string(b)}
	}()
	// While it runs: the file it wrote is in j1's sandbox on the node,
	// j1's claim is a run's, and no job of the run's own exists.
	seen := false
	var own []job
	for deadline := time.Now().Add(30 * time.Second); !seen && time.Now().Before(deadline); {
		own = append(own, jobs("agentkernel-")...)
		if out, err := nodeExec(node, "cat", "/tmp/took"); err == nil && out == token+"\n" {
			seen = true
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !seen {
		t.Errorf("the run's file never showed in pool job %s's sandbox %s", j1.ID, node)
	}
	if c := claim(j1.ID); c["run"] == "" || !strings.HasPrefix(c["run"], "serve-") {
		t.Errorf("pool job %s's claim while the run runs: %v, want a run's (the server's owner id)", j1.ID, c)
	}
	if own = append(own, jobs("agentkernel-")...); len(own) != 0 {
		t.Errorf("the run registered a job of its own: %+v", own)
	}
	var r runResp
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("POST /run did not return")
	}
	if r.err != nil || r.status != http.StatusOK || !strings.Contains(r.body, `"output":"`+token+`\n"`) {
		t.Fatalf("POST /run: %d %v %s", r.status, r.err, r.body)
	}
	if h, m := hits(), misses(); h != h0+1 || m != m0 {
		t.Errorf("pool runs: hit %d miss %d, want hit %d miss %d", h, m, h0+1, m0)
	}
	// j1 is purged after its one command, and the pool refills with
	// another job, which the next run takes.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if nomadGet("/v1/job/"+j1.ID, nil) == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("pool job %s is still on the agent after its run", j1.ID)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	j2 := waitingJob(j1.ID)
	if j2.Meta["agentkernel.node-name"] == node {
		t.Errorf("the refill %s reuses the node's sandbox name %s", j2.ID, node)
	}
	h0 = hits()
	rr := s.raw("POST", "/run", `{"command":["cat","/tmp/took"]}`)
	if rr.status != http.StatusConflict {
		t.Errorf("a file of the previous run in the next pooled one: %d %s", rr.status, rr.body)
	}
	if h := hits(); h != h0+1 {
		t.Errorf("the second run: hits %d, want %d", h, h0+1)
	}

	// SIGTERM: the server's pool jobs go with it.
	s.stop()
	for deadline := time.Now().Add(30 * time.Second); ; {
		left := jobs("agentkernel")
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("jobs left after serve stopped: %+v", left)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
}

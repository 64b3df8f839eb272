package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metricSum is the sum of the series of a metric whose line starts with
// prefix (e.g. `agentkernel_pool_warm_sandboxes{`).
func metricSum(t testing.TB, s *apiServer, prefix string) int {
	t.Helper()
	r := s.raw("GET", "/metrics", "")
	n := 0
	sc := bufio.NewScanner(strings.NewReader(string(r.body)))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, prefix) {
			v, _ := strconv.Atoi(line[strings.LastIndexByte(line, ' ')+1:])
			n += v
		}
	}
	return n
}

// TestAPIPool: fast runs (the default) come from the warm pool, yet each
// gets a clean sandbox; exit codes are reported as for ephemeral runs;
// pooled sandboxes are hidden from GET /sandboxes unless asked for by
// label; SIGTERM removes them all.
func TestAPIPool(t *testing.T) {
	s := startAPI(t, "--api-key", apiKey)
	warm := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for metricSum(t, s, "agentkernel_pool_warm_sandboxes{") == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no warm sandbox in /metrics")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	hits := func() int { return metricSum(t, s, `agentkernel_pool_runs_total{result="hit"}`) }

	// The first request of a key runs ephemerally and creates its pool,
	// which fills in the background and shows in /metrics.
	r := s.raw("POST", "/run", `{"command":["true"],"image":"host"}`)
	r.expect(t, "first", 200, "")
	warm()

	// Clean sandbox per request: a file one run leaves is gone in the next.
	h0 := hits()
	r = s.raw("POST", "/run", `{"command":["sh","-c","touch /tmp/x && echo made"],"image":"host"}`)
	r.expect(t, "touch", 200, "")
	warm()
	r = s.raw("POST", "/run", `{"command":["test","-e","/tmp/x"],"image":"host"}`)
	r.expect(t, "test -e", 409, "Command exited with code 1: ")
	if h := hits(); h != h0+2 {
		t.Errorf("pool hits: %d, want %d", h, h0+2)
	}

	// Exit codes and output as before.
	r = s.raw("POST", "/run", `{"command":["sh","-c","echo out; exit 3"],"image":"host","fast":true}`)
	r.expect(t, "exit 3", 409, "Command exited with code 3: out\n")
	var code int
	json.Unmarshal(r.env["exit_code"], &code)
	if code != 3 || r.str("output") != "out\n" {
		t.Errorf("exit 3: exit_code %d output %q", code, r.str("output"))
	}
	// argv unchanged.
	r = s.raw("POST", "/run", `{"command":["printf","%s|","a b","c"],"image":"host"}`)
	r.expect(t, "argv", 200, "")
	var out struct{ Output string }
	json.Unmarshal(r.env["data"], &out)
	if out.Output != "a b|c|" {
		t.Errorf("argv: output %q", out.Output)
	}
	// fast and ephemeral runs see the same environment and directory.
	same := func(cmd string) {
		t.Helper()
		warm()
		var a, b struct{ Output string }
		r1 := s.raw("POST", "/run", `{"command":["sh","-c",`+strconv.Quote(cmd)+`],"image":"host","fast":true}`)
		r2 := s.raw("POST", "/run", `{"command":["sh","-c",`+strconv.Quote(cmd)+`],"image":"host","fast":false}`)
		json.Unmarshal(r1.env["data"], &a)
		json.Unmarshal(r2.env["data"], &b)
		if r1.status != 200 || a.Output != b.Output {
			t.Errorf("%s: fast %d %q, ephemeral %d %q", cmd, r1.status, a.Output, r2.status, b.Output)
		}
	}
	same("pwd; id -u; env | grep -v '^HOSTNAME=' | sort")

	warm()
	// Hidden from the list unless asked for.
	r = s.raw("GET", "/sandboxes", "")
	if string(r.env["data"]) != "[]" {
		t.Errorf("GET /sandboxes shows pooled sandboxes: %s", r.env["data"])
	}
	if out := s.a.run("sandbox", "list", "--json"); strings.Contains(out.stdout, "pool-") {
		t.Errorf("sandbox list shows pooled sandboxes: %s", out.stdout)
	}
	if out := s.a.run("sandbox", "list", "--label", "agentkernel.pool=1", "--json"); !strings.Contains(out.stdout, "pool-") {
		t.Errorf("sandbox list --label agentkernel.pool=1: %s", out.stdout)
	}
	r = s.raw("GET", "/sandboxes?label=agentkernel.pool:1", "")
	var pooled []struct{ Name string }
	json.Unmarshal(r.env["data"], &pooled)
	if len(pooled) == 0 || !strings.HasPrefix(pooled[0].Name, "pool-") {
		t.Errorf("label filter: %s", r.env["data"])
	}

	// Streaming uses the pool too.
	warm()
	h0 = hits()
	req, _ := http.NewRequest("POST", s.url+"/run/stream", strings.NewReader(`{"command":["sh","-c","echo s; exit 4"],"image":"host"}`))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"data":"s\n"`) || !strings.Contains(string(body), "event: done\ndata: {\"exit_code\":4,\"success\":false}") {
		t.Errorf("stream: %s", body)
	}
	if h := hits(); h != h0+1 {
		t.Errorf("stream: pool hits %d, want %d", h, h0+1)
	}

	// SIGTERM removes every pooled sandbox: no directories, no mounts.
	s.stop()
	if ents, _ := os.ReadDir(s.a.dataDir + "/sandboxes"); len(ents) != 0 {
		t.Errorf("sandbox directories left after SIGTERM: %v", ents)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), s.a.dataDir) {
		t.Errorf("mounts left under the data dir after SIGTERM")
	}
	if out := s.a.run("sandbox", "list", "--label", "agentkernel.pool=1", "--json"); strings.Contains(out.stdout, "pool-") {
		t.Errorf("sandbox list after SIGTERM: %s", out.stdout)
	}
}

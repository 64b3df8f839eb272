//go:build linux

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

	// A timeout counts from the request, and holds for pooled runs.
	warm()
	// Prepared sandboxes are not persistent sandboxes: never listed.
	r = s.raw("GET", "/sandboxes", "")
	if string(r.env["data"]) != "[]" {
		t.Errorf("GET /sandboxes shows pooled sandboxes: %s", r.env["data"])
	}
	if out := s.a.run("sandbox", "list", "--all", "--json"); strings.Contains(out.stdout, "pool") {
		t.Errorf("sandbox list shows pooled sandboxes: %s", out.stdout)
	}

	// Streaming uses the pool too.
	warm()
	h0 = hits()
	req, _ := http.NewRequest("POST", s.url+"/run/stream", strings.NewReader(`{"command":["sh","-c","echo s; exit 4"],"image":"host"}`))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
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

	// SIGTERM discards every prepared sandbox: no processes, no mounts.
	warm()
	inits := childInits(s.cmd.Process.Pid)
	if len(inits) == 0 {
		t.Errorf("no prepared sandbox's init is a child of the server")
	}
	s.stop()
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range inits {
		for isInit(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if isInit(pid) {
			t.Errorf("prepared sandbox init %d left after SIGTERM", pid)
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), s.a.dataDir) {
		t.Errorf("mounts left under the data dir after SIGTERM")
	}
}

// childInits are the pids of the sandbox inits whose parent is ppid.
func childInits(ppid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !isInit(pid) {
			continue
		}
		st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) {
			out = append(out, pid)
		}
	}
	return out
}

func isInit(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && strings.HasPrefix(string(b), "agentkernel:init")
}

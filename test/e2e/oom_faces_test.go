//go:build linux

package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// oomHog needs 100 MiB in one process: under a 16 MiB limit the OOM
// killer's only choice.
var oomHog = []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=100M", "count=1"}

// oomLine is what every face says of a command the memory limit killed.
const oomLine = "the command was killed: out of memory (limit 16 MiB)"

// TestOOMExecAPIMCP: a command the memory limit kills says so, naming the
// limit, besides its 137, on every face that runs commands: exec into a
// persistent sandbox (CLI, HTTP API, MCP), the HTTP API's /run,
// /run/stream and /batch/run, and MCP's sandbox_run. A plain SIGKILL
// says nothing; a killed child of a command that succeeds is a warning.
func TestOOMExecAPIMCP(t *testing.T) {
	a := newAK(t)
	// The limit of the runs the API and MCP resolve (the server's project
	// configuration).
	if err := os.WriteFile(filepath.Join(a.dir, "agentkernel.toml"), []byte("[resources]\nmemory_mb = 16\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.must("sandbox", "create", "oombox", "--image", "host", "--memory", "16m", "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "oombox") })

	t.Run("cli exec", func(t *testing.T) {
		r := a.run(append([]string{"exec", "oombox", "--"}, oomHog...)...)
		if r.code != 137 || !strings.Contains(r.stderr, "agentkernel: "+oomLine+"; ") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("over the limit: %v", r)
		}
		if r := a.run("exec", "oombox", "--", "sh", "-c", "kill -9 $$"); r.code != 137 || r.stderr != "" {
			t.Errorf("plain SIGKILL: %v", r)
		}
		r = a.run(append([]string{"exec", "oombox", "--", "sh", "-c", `"$@" 2>/dev/null; echo child $?`, "sh"}, oomHog...)...)
		if r.code != 0 || r.stdout != "child 137\n" || !strings.Contains(r.stderr, "agentkernel: warning: a process in the sandbox was killed: out of memory (limit 16 MiB)") {
			t.Errorf("child over the limit: %v", r)
		}
	})

	s := startServe(t, a, "listening on ", "serve", "--port", "0", "--api-key", apiKey)
	hogJSON, _ := json.Marshal(oomHog)
	t.Run("api", func(t *testing.T) {
		check409 := func(what string, r rawResp) {
			t.Helper()
			var code int
			json.Unmarshal(r.env["exit_code"], &code)
			if r.status != http.StatusConflict || code != 137 || !strings.Contains(r.str("output"), "agentkernel: "+oomLine+"\n") ||
				!strings.HasPrefix(r.str("error"), "Command exited with code 137: ") || !strings.Contains(r.str("error"), oomLine) {
				t.Errorf("%s: %d %s", what, r.status, r.body)
			}
		}
		check409("POST /run", s.raw("POST", "/run", `{"command":`+string(hogJSON)+`,"image":"host"}`))
		check409("POST /run fast:false", s.raw("POST", "/run", `{"command":`+string(hogJSON)+`,"image":"host","fast":false}`))
		check409("POST /sandboxes/oombox/exec", s.raw("POST", "/sandboxes/oombox/exec", `{"command":`+string(hogJSON)+`}`))
		r := s.raw("POST", "/sandboxes/oombox/exec", `{"command":["sh","-c","kill -9 $$"]}`)
		if r.status != http.StatusConflict || strings.Contains(string(r.body), "out of memory") {
			t.Errorf("exec, plain SIGKILL: %d %s", r.status, r.body)
		}
		r = s.raw("POST", "/batch/run", `{"commands":[{"command":`+string(hogJSON)+`,"image":"host"},{"command":["echo","ok"],"image":"host"}]}`)
		var batch struct {
			Results []struct {
				Output *string `json:"output"`
				Error  *string `json:"error"`
			} `json:"results"`
		}
		if err := json.Unmarshal(r.env["data"], &batch); err != nil || len(batch.Results) != 2 || batch.Results[0].Error == nil ||
			!strings.Contains(*batch.Results[0].Error, "Command exited with code 137: ") || !strings.Contains(*batch.Results[0].Error, oomLine) ||
			batch.Results[1].Output == nil || *batch.Results[1].Output != "ok\n" {
			t.Errorf("POST /batch/run: %d %s", r.status, r.body)
		}
		// The stream: the note is a stderr output frame before done.
		req, _ := http.NewRequestWithContext(t.Context(), "POST", s.url+"/run/stream", strings.NewReader(`{"command":`+string(hogJSON)+`,"image":"host"}`))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		note, _ := json.Marshal(map[string]string{"data": "agentkernel: " + oomLine + "\n", "stream": "stderr"})
		want := "event: output\ndata: " + string(note) + "\n\nevent: done\ndata: {\"exit_code\":137,\"success\":false}\n\n"
		if !strings.HasSuffix(string(b), want) {
			t.Errorf("POST /run/stream: %s", b)
		}
	})

	t.Run("mcp", func(t *testing.T) {
		m := mcpSession(t, a, nil)
		text, isErr := call(t, m, "sandbox_exec", map[string]any{"name": "oombox", "command": oomHog})
		if !isErr || !strings.Contains(text, "command exited with code 137\n") || !strings.Contains(text, "agentkernel: "+oomLine+"\n") {
			t.Errorf("sandbox_exec: %q %v", text, isErr)
		}
		text, isErr = call(t, m, "sandbox_run", map[string]any{"command": oomHog, "image": "host"})
		if !isErr || !strings.Contains(text, "command exited with code 137\n") || !strings.Contains(text, "agentkernel: "+oomLine+"\n") {
			t.Errorf("sandbox_run: %q %v", text, isErr)
		}
		text, isErr = call(t, m, "sandbox_exec", map[string]any{"name": "oombox", "command": []string{"sh", "-c", "kill -9 $$"}})
		if !isErr || strings.Contains(text, "out of memory") {
			t.Errorf("sandbox_exec, plain SIGKILL: %q %v", text, isErr)
		}
	})
}

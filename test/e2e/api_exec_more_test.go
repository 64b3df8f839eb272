//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/pkg/client"
)

// testExecMoreAPI (part of TestAPIContract, whose recorder checks every
// answer against openapi.yaml): detached commands, exec's and run's
// timeout_ms, a client that goes away, a sandbox by UUID, the batch
// file write's and gc's answers.
func testExecMoreAPI(t *testing.T, s *apiServer) {
	c := s.client(apiKey)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const name = "api-more"
	t.Cleanup(func() { s.a.run("sandbox", "rm", "--force", name) })
	// running reports whether a process of the sandbox has what in its
	// command line.
	running := func(what string) bool {
		out, err := c.Exec(ctx, name, []string{"sh", "-c", `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f; echo; done`}, nil)
		if err != nil {
			t.Fatalf("listing processes: %v", err)
		}
		return strings.Contains(out, what)
	}
	s.raw("POST", "/sandboxes", `{"name":"`+name+`","image":"host"}`).expect(t, "create", 201, "")

	// Detached: runs on after the request, logs by stream and offset.
	d, err := c.ExecDetached(ctx, name, []string{"sh", "-c", "echo one; echo two >&2; exec sleep 4646"}, nil)
	if err != nil || len(d.ID) != 16 || d.Status != "running" || d.Sandbox != name || d.ExitCode != nil || d.StartedAt == "" {
		t.Fatalf("exec detached: %+v %v", d, err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		out, err := c.DetachedLogs(ctx, name, d.ID, "stderr", 0)
		if err == nil && out == "two\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stderr: %q %v", out, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out, err := c.DetachedLogs(ctx, name, d.ID, "", 0); err != nil || out != "one\n" {
		t.Errorf("stdout: %q %v", out, err)
	}
	if out, err := c.DetachedLogs(ctx, name, d.ID, "stdout", 2); err != nil || out != "e\n" {
		t.Errorf("stdout from 2: %q %v", out, err)
	}
	r := s.raw("GET", "/sandboxes/"+name+"/exec/detached/"+d.ID+"/logs?stream=stderr&offset=4", "")
	r.expect(t, "logs at the end", 200, "")
	if string(r.env["data"]) != `{"stderr":""}` {
		t.Errorf("logs at the end: %s", r.body)
	}
	s.raw("GET", "/sandboxes/"+name+"/exec/detached/"+d.ID+"/logs?offset=5", "").expect(t, "offset past the end", 416, "offset 5 is past the end of stdout (4 bytes)*")
	s.raw("GET", "/sandboxes/"+name+"/exec/detached/"+d.ID+"/logs?offset=-1", "").expect(t, "negative offset", 400, "Invalid offset '-1': a byte offset, 0 or more")
	s.raw("GET", "/sandboxes/"+name+"/exec/detached/"+d.ID+"/logs?stream=stdin", "").expect(t, "bad stream", 400, "Invalid stream 'stdin': use stdout or stderr")
	s.raw("GET", "/sandboxes/"+name+"/exec/detached/../logs", "").expect(t, "id ..", 400, "Invalid command id '..'")
	s.raw("GET", "/sandboxes/"+name+"/exec/detached/XYZ", "").expect(t, "bad id", 400, "Invalid command id 'XYZ'")
	s.raw("GET", "/sandboxes/"+name+"/exec/detached/ffffffffffffffff", "").expect(t, "unknown id", 404, "Detached command 'ffffffffffffffff' not found")
	s.raw("GET", "/sandboxes/nope/exec/detached", "").expect(t, "unknown sandbox", 404, "Sandbox not found")
	s.raw("POST", "/sandboxes/"+name+"/exec/detach", `{"command":[]}`).expect(t, "detach empty", 400, "command is required")
	if !running("sleep 4646") {
		t.Errorf("the detached command does not run")
	}
	if st, err := c.DetachedStatus(ctx, name, d.ID); err != nil || st.Status != "running" || st.Pid <= 0 {
		t.Errorf("status: %+v %v", st, err)
	}
	if l, err := c.DetachedList(ctx, name); err != nil || len(l) != 1 || l[0].ID != d.ID {
		t.Errorf("list: %+v %v", l, err)
	}
	r = s.raw("DELETE", "/sandboxes/"+name+"/exec/detached/"+d.ID, "")
	r.expect(t, "kill", 200, "")
	r.dataString(t, "kill", "Command killed")
	if st, err := c.DetachedStatus(ctx, name, d.ID); err != nil || st.Status != "failed" || st.ExitCode == nil || *st.ExitCode != 137 || st.FinishedAt == "" {
		t.Errorf("status after kill: %+v %v", st, err)
	}
	if err := c.DetachedKill(ctx, name, "0000000000000000"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("kill unknown: %v", err)
	}
	if running("sleep 4646") {
		t.Errorf("killed command still runs")
	}

	// Timeouts: exit code 124, as run's.
	start := time.Now()
	_, err = c.Exec(ctx, name, []string{"sh", "-c", "echo before; exec sleep 4747"}, &client.ExecOptions{TimeoutMS: 500})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 409 || ae.ExitCode == nil || *ae.ExitCode != 124 || ae.Output != "before\n" ||
		!strings.HasPrefix(ae.Message, "Command timed out after 500ms") || time.Since(start) > 15*time.Second {
		t.Errorf("exec timeout: %#v", err)
	}
	if running("sleep 4747") {
		t.Errorf("timed-out command still runs")
	}
	s.raw("POST", "/sandboxes/"+name+"/exec", `{"command":["true"],"timeout_ms":0}`).expect(t, "timeout 0", 400, "timeout_ms must be between 1 and 86400000")
	s.raw("POST", "/sandboxes/"+name+"/exec", `{"command":["true"],"workdir":"tmp"}`).expect(t, "relative workdir", 400, `workdir "tmp": must be absolute`)
	for _, fast := range []string{"true", "false"} {
		r = s.raw("POST", "/run", `{"command":["sleep","30"],"image":"host","fast":`+fast+`,"timeout_ms":500}`)
		r.expect(t, "run timeout fast="+fast, 409, "Command timed out after 500ms*")
		if string(r.env["exit_code"]) != "124" {
			t.Errorf("run timeout fast=%s: %s", fast, r.body)
		}
	}

	// A client that goes away: its command is killed, and audited so.
	rctx, rcancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(rctx, "POST", s.url+"/sandboxes/"+name+"/exec", strings.NewReader(`{"command":["sh","-c","exec sleep 4848"]}`))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	for deadline := time.Now().Add(15 * time.Second); ; {
		if running("sleep 4848") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command did not start")
		}
		time.Sleep(100 * time.Millisecond)
	}
	rcancel()
	<-done
	for deadline := time.Now().Add(15 * time.Second); ; {
		alive := running("sleep 4848")
		logs, _ := c.Logs(ctx, name)
		audited := false
		for _, e := range logs {
			if d, _ := e["details"].(string); strings.Contains(d, "client gone") && strings.Contains(jsonString(e["command"]), "sleep 4848") {
				audited = true
			}
		}
		if !alive && audited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the client went: running %v, audited %v", alive, audited)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// By UUID.
	info, err := c.GetSandbox(ctx, name)
	if err != nil || info.UUID == "" {
		t.Fatalf("info: %+v %v", info, err)
	}
	if got, err := c.GetSandboxByUUID(ctx, strings.ToUpper(info.UUID)); err != nil || got.Name != name || got.UUID != info.UUID {
		t.Errorf("by uuid: %+v %v", got, err)
	}
	s.raw("GET", "/sandboxes/by-uuid/not-a-uuid", "").expect(t, "malformed uuid", 400, "Invalid sandbox UUID")
	s.raw("GET", "/sandboxes/by-uuid/01234567-89ab-7def-8123-456789abcdef", "").expect(t, "unknown uuid", 404, "*")
	s.raw("GET", "/sandboxes/"+name+"/nothing", "").expect(t, "unknown sub-route", 404, "Not found")
	s.raw("DELETE", "/sandboxes/by-uuid/"+info.UUID, "").expect(t, "by uuid, wrong method", 404, "Not found")

	// Batch write: "Wrote N file(s)".
	r = s.raw("POST", "/sandboxes/"+name+"/files", `{"files":{"/tmp/b/1":"x","/tmp/b/2":"yz"}}`)
	r.expect(t, "write files", 200, "")
	r.dataString(t, "write files", "Wrote 2 file(s)")
	s.raw("POST", "/sandboxes/"+name+"/files", `{"files":{}}`).expect(t, "write no files", 400, "*")
	if out, _ := c.Exec(ctx, name, []string{"cat", "/tmp/b/1", "/tmp/b/2"}, nil); out != "xyz" {
		t.Errorf("written: %q", out)
	}

	// gc: the bare names of the sandboxes it removed.
	if r := s.a.run("sandbox", "create", "api-gc-expired", "--image", "host", "--ttl", "1s"); r.code != 0 {
		t.Fatalf("create: %v", r)
	}
	time.Sleep(1100 * time.Millisecond)
	r = s.raw("POST", "/gc", "")
	r.expect(t, "gc", 200, "")
	if !bytes.Contains(r.body, []byte(`"data":{"removed":["api-gc-expired"],"count":1}`)) && !bytes.Contains(r.body, []byte(`"data":{"count":1,"removed":["api-gc-expired"]}`)) {
		t.Errorf("gc: %s", r.body)
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

//go:build linux

package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/agentkernel/agentkernel/internal/asciicast"
)

// TestAttachRecord: attach --record through a real terminal records what
// the terminal showed, what was typed (--record-input) and a resize, to
// the default file under the data directory; the audit entry of the
// session names the file, and replay plays it back.
func TestAttachRecord(t *testing.T) {
	a, _ := newSandbox(t, "rec")
	c, master, r := ptyRun(t, a, 30, 100, "attach", "--record", "--record-input", "rec")
	master.Write([]byte("echo rec-$((6*7))\r"))
	expect(t, r, "rec-42")
	if err := pty.Setsize(master, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	// The resize reaches agentkernel as SIGWINCH: ask until the shell
	// sees it, so that it is recorded before the session ends.
	waitFor(t, master, r, "stty size\r", "40 120")
	master.Write([]byte("exit\r"))
	rest := make(chan string, 1)
	go func() {
		var sb strings.Builder
		for {
			b, err := r.ReadByte()
			if err != nil {
				rest <- sb.String()
				return
			}
			sb.WriteByte(b)
		}
	}()
	if code := exitCode(t, c); code != 0 {
		t.Fatalf("attach exit: %d", code)
	}

	files, _ := filepath.Glob(filepath.Join(a.dataDir, "recordings", "rec-*.cast"))
	if len(files) != 1 {
		t.Fatalf("recordings: %q", files)
	}
	file := files[0]
	if !strings.HasSuffix(filepath.Base(file), ".cast") || len(filepath.Base(file)) != len("rec-20060102-150405.cast") {
		t.Errorf("file name %s, want rec-YYYYMMDD-HHMMSS.cast", file)
	}
	select {
	case s := <-rest:
		if !strings.Contains(s, "recorded to "+file) {
			t.Errorf("attach did not say where the recording is: %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Error("the terminal did not close")
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("recording: %v %v", st, err)
	}
	data, _ := os.ReadFile(file)
	header, _, _ := strings.Cut(string(data), "\n")
	var h map[string]any
	if err := json.Unmarshal([]byte(header), &h); err != nil {
		t.Fatalf("header %q: %v", header, err)
	}
	if h["version"] != 2.0 || h["width"] != 100.0 || h["height"] != 30.0 || h["title"] != "agentkernel attach rec" || h["timestamp"] == nil {
		t.Errorf("header %s", header)
	}
	f, _ := os.Open(file)
	defer f.Close()
	_, events, err := asciicast.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	var out, in strings.Builder
	var resizes []string
	for ev, err := range events {
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		switch ev.Type {
		case asciicast.Output:
			out.WriteString(ev.Data)
		case asciicast.Input:
			in.WriteString(ev.Data)
		case asciicast.Resize:
			resizes = append(resizes, ev.Data)
		}
	}
	if !strings.Contains(out.String(), "rec-42") || !strings.Contains(out.String(), "40 120") {
		t.Errorf("recorded output %q", out.String())
	}
	// (The first line's \r may arrive as \n: typed before attach made
	// its own terminal raw.)
	if !strings.Contains(in.String(), "echo rec-$((6*7))") || !strings.Contains(in.String(), "exit\r") {
		t.Errorf("recorded input %q", in.String())
	}
	if len(resizes) == 0 || resizes[0] != "120x40" {
		t.Errorf("resizes %q, want 120x40", resizes)
	}

	// The audit entry of the session names the recording.
	found := false
	for _, e := range auditLines(t, a) {
		if e["action"] == "exec" && e["sandbox"] == "rec" && e["recording"] == file {
			found = true
		}
	}
	if !found {
		t.Errorf("no audit entry with the recording %s", file)
	}
	if res := a.must("audit", "--sandbox", "rec"); !strings.Contains(res.stdout, "(recorded to "+file+")") {
		t.Errorf("audit's table does not show the recording:\n%s", res.stdout)
	}

	res := a.must("replay", "--speed", "50", file)
	if !strings.Contains(res.stdout, "rec-42") || strings.Contains(res.stdout, "Playing:") {
		t.Errorf("replay stdout %q", res.stdout)
	}
	if !strings.Contains(res.stderr, "Terminal: 100x30") || !strings.Contains(res.stderr, "Playback complete.") {
		t.Errorf("replay stderr %q", res.stderr)
	}
}

// TestAttachRecordFile: --record FILE writes FILE (and no input without
// --record-input); a FILE that exists is refused before the shell starts
// and left as it was; replay refuses what is not a recording.
func TestAttachRecordFile(t *testing.T) {
	a, _ := newSandbox(t, "recf")
	file := filepath.Join(a.dir, "s.cast")
	c, master, r := ptyRun(t, a, 24, 80, "attach", "recf", "--record", file)
	master.Write([]byte("echo file-$((1+1))\r"))
	expect(t, r, "file-2")
	master.Write([]byte("exit 4\r"))
	if code := exitCode(t, c); code != 4 {
		t.Fatalf("attach exit: %d", code)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), `{"version":2,"width":80,"height":24,`) || !strings.Contains(string(data), "file-2") {
		t.Errorf("recording %q", data)
	}
	if strings.Contains(string(data), `, "i", `) {
		t.Errorf("input recorded without --record-input: %q", data)
	}

	res := a.run("attach", "--record", file, "recf")
	if res.code != 125 || !strings.Contains(res.stderr, "exists") {
		t.Errorf("attach --record over a recording: %+v", res)
	}
	if now, _ := os.ReadFile(file); string(now) != string(data) {
		t.Error("the existing recording was changed")
	}
	// A session that never begins (its shell refused by the sandbox)
	// leaves no recording of a header alone.
	never := filepath.Join(a.dir, "never.cast")
	c, _, _ = ptyRun(t, a, 24, 80, "attach", "recf", "--shell", "/no/such/shell", "--record", never)
	if code := exitCode(t, c); code == 0 {
		t.Errorf("attach with a missing shell exited 0")
	}
	if b, err := os.ReadFile(never); err == nil {
		t.Errorf("a session that never began left a recording: %q", b)
	}

	for _, bad := range []struct{ content, msg string }{
		{"#!/bin/sh\necho hi\n", "is not an asciicast v2 recording: line 1: "},
		{`{"version":2,"width":80,"height":24}` + "\n" + `[0.5, "o", "a"]` + "\n[1, 2]\n", "line 3: an event has 3 elements"},
	} {
		p := filepath.Join(a.dir, "bad.cast")
		os.WriteFile(p, []byte(bad.content), 0o600)
		res := a.run("replay", p)
		if res.code != 125 || !strings.Contains(res.stderr, bad.msg) || res.stdout != "" {
			t.Errorf("replay of %q: %+v, want exit 125 and %q", bad.content, res, bad.msg)
		}
	}
	if res := a.run("replay", filepath.Join(a.dir, "none.cast")); res.code != 125 || !strings.Contains(res.stderr, "recording file not found") {
		t.Errorf("replay of a missing file: %+v", res)
	}
}

// TestReplayTiming: replay keeps the recording's timing, divided by
// --speed, with pauses cut to --max-idle: measured on the command's
// wall time against what the uncut pause would take.
func TestReplayTiming(t *testing.T) {
	a := newAK(t)
	file := filepath.Join(a.dir, "idle.cast")
	// Output at 0.2 s, then a 6 s idle gap, then output at 6.4 s.
	os.WriteFile(file, []byte(`{"version":2,"width":80,"height":24}
[0.200000, "o", "first\r\n"]
[6.200000, "o", "second\r\n"]
[6.400000, "o", "third\r\n"]
`), 0o600)
	for _, c := range []struct {
		args     []string
		min, max time.Duration
	}{
		// 0.1 + 0.25 (cut from 3) + 0.1: about 0.45 s; 3.2 s uncut.
		{[]string{"--speed", "2", "--max-idle", "250ms"}, 450 * time.Millisecond, 2500 * time.Millisecond},
		// No cut, 8 times as fast: 0.8 s.
		{[]string{"--speed", "8", "--max-idle", "0"}, 800 * time.Millisecond, 3 * time.Second},
	} {
		res := a.must(append(append([]string{"replay"}, c.args...), file)...)
		if res.stdout != "first\r\nsecond\r\nthird\r\n" {
			t.Errorf("%v: played %q", c.args, res.stdout)
		}
		if res.took < c.min || res.took > c.max {
			t.Errorf("%v: took %v, want %v to %v", c.args, res.took, c.min, c.max)
		}
	}
}

// waitFor writes ask to the terminal until want shows (5 s at most).
func waitFor(t *testing.T, master *os.File, r *bufio.Reader, ask, want string) {
	t.Helper()
	found := make(chan bool, 1)
	go func() {
		var sb strings.Builder
		for {
			b, err := r.ReadByte()
			if err != nil {
				found <- false
				return
			}
			sb.WriteByte(b)
			if strings.Contains(sb.String(), want) {
				found <- true
				return
			}
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		master.Write([]byte(ask))
		select {
		case ok := <-found:
			if ok {
				return
			}
			t.Fatalf("the terminal closed before %q showed", want)
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Fatalf("%q did not show", want)
}

// auditLines is the data directory's audit log, each entry as a map.
func auditLines(t *testing.T, a *ak) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(a.dataDir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var e map[string]any
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		out = append(out, e)
	}
	return out
}

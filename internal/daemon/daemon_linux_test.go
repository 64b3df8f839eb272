package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestStalePIDFile: a pid file naming a live process that is not this
// data directory's daemon (a reused pid) does not count, so 'daemon
// stop' never signals an unrelated process.
func TestStalePIDFile(t *testing.T) {
	p := PathsFor(t.TempDir())
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{strconv.Itoa(os.Getpid()), "1", "garbage", "-5", "999999999"} {
		if err := os.WriteFile(p.PIDFile, []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if pid := p.PID(); pid != 0 {
			t.Errorf("pid file %q: PID() = %d, want 0", content, pid)
		}
	}
	if err := os.Remove(p.PIDFile); err != nil {
		t.Fatal(err)
	}
	if pid := p.PID(); pid != 0 {
		t.Errorf("no pid file: PID() = %d", pid)
	}
}

// TestRunSocket speaks the run socket's protocol to a served Handler
// whose Run reports what it was given (the sandbox side is covered by
// the e2e tests with a real daemon): bad requests get a clear reply and
// run nothing; a good one reaches Run with the client's stdio and its
// signals; another build of the client is turned away.
func TestRunSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "run.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode: %v %v", fi.Mode(), err)
	}
	var ran atomic.Int32
	gotSig := make(chan os.Signal, 1)
	h := Handler{
		Build: BuildID(),
		Run: func(ctx context.Context, spec *sandbox.Spec, stdio sandbox.Stdio, sigs <-chan os.Signal, warn func(string)) (sandbox.Result, string, error) {
			ran.Add(1)
			warn("no cgroup limits")
			if len(spec.Args) > 0 && spec.Args[0] == "missing" {
				return sandbox.Result{}, "", fmt.Errorf("missing: %w", sandbox.ErrNotFound)
			}
			fmt.Fprint(stdio.Stdout.(*os.File), "to the client's stdout")
			select {
			case s := <-sigs:
				gotSig <- s
				return sandbox.Result{ExitCode: 143, Signal: 15}, "hit", nil
			case <-time.After(5 * time.Second):
				return sandbox.Result{ExitCode: 0}, "hit", nil
			}
		},
		Prewarm: func(*sandbox.Spec, int) error { return nil },
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { Serve(ctx, ln, h); close(served) }()
	defer func() { cancel(); <-served }()

	raw := func(msg []byte, oob []byte) Reply {
		t.Helper()
		c, err := dial(sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.send(msg, oob); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("no reply: %v", err)
		}
		var r Reply
		if err := json.Unmarshal(buf[:n], &r); err != nil {
			t.Fatalf("reply %q: %v", buf[:n], err)
		}
		return r
	}
	spec := &sandbox.Spec{Args: []string{"true"}}
	good, _ := json.Marshal(Request{Op: "run", Spec: spec, Build: BuildID()})
	for name, c := range map[string]struct {
		msg  []byte
		want string
	}{
		"not JSON":    {[]byte("\x00garbage"), "bad request"},
		"no spec":     {[]byte(`{"op":"run","build":"` + BuildID() + `"}`), "bad request"},
		"no stdio":    {good, "stdin, stdout and stderr"},
		"unknown op":  {[]byte(`{"op":"rm -rf","spec":{},"build":"` + BuildID() + `"}`), "unknown op"},
		"other build": {[]byte(`{"op":"run","spec":{},"build":"1-2"}`), ErrStale.Error()},
		"too large":   {append(append([]byte(`{"op":"run","spec":{"args":["`), bytes.Repeat([]byte("x"), maxRequest)...), `"]}}`...), "bad request"},
	} {
		if r := raw(c.msg, nil); !strings.Contains(r.Error, c.want) {
			t.Errorf("%s: reply %+v, want an error with %q", name, r, c.want)
		}
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("bad requests ran %d commands", n)
	}
	if r := raw([]byte(`{"op":"run","spec":{},"build":"1-2"}`), nil); !errors.Is(r.err(), ErrStale) {
		t.Errorf("stale reply maps to %v", r.err())
	}

	// A good run: stdout is the client's own file, a signal is passed on.
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	c, err := dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.send(good, unix.UnixRights(int(devnull.Fd()), int(out.Fd()), int(out.Fd()))); err != nil {
		t.Fatal(err)
	}
	sig, _ := json.Marshal(control{Signal: 15})
	deadline := time.Now().Add(5 * time.Second)
	for ran.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	c.Write(sig)
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	var r Reply
	if err != nil || json.Unmarshal(buf[:n], &r) != nil || r.ExitCode != 143 || r.Served != "hit" {
		t.Fatalf("run reply %q %v", buf[:n], err)
	}
	select {
	case s := <-gotSig:
		if s != syscall.SIGTERM {
			t.Errorf("signal %v", s)
		}
	default:
		t.Errorf("the signal did not reach Run")
	}
	// A warning reaches the client's stderr (here the same file) ahead
	// of the command's output, as a direct run prints it.
	const want = "agentkernel: warning: no cgroup limits\nto the client's stdout"
	if b, _ := os.ReadFile(out.Name()); string(b) != want {
		t.Errorf("client's stdout holds %q, want %q", b, want)
	}
	// Errors keep their kind across the socket (exit 127 in the CLI);
	// a quiet client gets no warning.
	missing, _ := json.Marshal(Request{Op: "run", Spec: &sandbox.Spec{Args: []string{"missing"}}, Build: BuildID(), Quiet: true})
	if r := raw(missing, unix.UnixRights(int(devnull.Fd()), int(out.Fd()), int(out.Fd()))); !errors.Is(r.err(), sandbox.ErrNotFound) || strings.Count(r.err().Error(), "command not found") != 1 {
		t.Errorf("not found: %+v -> %v", r, r.err())
	}
	if b, _ := os.ReadFile(out.Name()); string(b) != want {
		t.Errorf("a quiet client got a warning: %q", b)
	}
}

// TestClientUnusedPassesSignalsOn: a client that caught a signal while
// its caller resolved a spec, and then was not used (the caller runs
// the spec itself), raises the signal again on Close.
func TestClientUnusedPassesSignalsOn(t *testing.T) {
	c := NewClient(filepath.Join(t.TempDir(), "none.sock"))
	<-c.ready
	if err := unix.Kill(os.Getpid(), unix.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(c.sigCh) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if len(c.sigCh) != 1 {
		t.Fatal("the client did not catch SIGUSR1")
	}
	mine := make(chan os.Signal, 1)
	signal.Notify(mine, unix.SIGUSR1)
	defer signal.Stop(mine)
	c.Close()
	c.Close() // twice is harmless
	select {
	case <-mine:
	case <-time.After(5 * time.Second):
		t.Fatal("SIGUSR1 was not raised again after Close")
	}
	if _, err := c.Run(&sandbox.Spec{Args: []string{"true"}}, os.Stdin, os.Stdout, os.Stderr); err == nil {
		t.Fatal("a closed client ran")
	}
}

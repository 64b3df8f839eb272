package agent

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// hostSandbox is a Sandbox whose commands are host processes: the real
// Server, protocol, sockets and descriptors, without a sandbox around
// the commands (those are the backend's tests).
type hostSandbox struct{}

func (hostSandbox) Exec(req *ExecRequest, stdio [3]int) (Process, error) {
	path, err := exec.LookPath(req.Args[0])
	if err != nil {
		return nil, &ExecError{Kind: KindExec, Errno: syscall.ENOENT, Msg: err.Error()}
	}
	pid, err := syscall.ForkExec(path, req.Args, &syscall.ProcAttr{
		Env:   append(os.Environ(), req.Env...),
		Files: []uintptr{uintptr(stdio[0]), uintptr(stdio[1]), uintptr(stdio[2])},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return nil, &ExecError{Kind: KindExec, Errno: err.(syscall.Errno), Msg: err.Error()}
	}
	return &hostProc{pid: pid}, nil
}

func (hostSandbox) FS() *FS      { return nil }
func (hostSandbox) Stats() Stats { return Stats{} }
func (hostSandbox) Stop()        {}

type hostProc struct {
	pid  int
	once sync.Once
	ws   syscall.WaitStatus
}

func (p *hostProc) Pid() int                             { return p.pid }
func (p *hostProc) Signal(sig syscall.Signal) error      { return syscall.Kill(p.pid, sig) }
func (p *hostProc) SignalGroup(sig syscall.Signal) error { return syscall.Kill(-p.pid, sig) }
func (p *hostProc) Wait() syscall.WaitStatus {
	p.once.Do(func() {
		for {
			if _, err := syscall.Wait4(p.pid, &p.ws, 0, nil); err != syscall.EINTR {
				return
			}
		}
	})
	return p.ws
}

// serveHost serves a Server over hostSandbox on a socket in a temporary
// directory, with detached commands under dir/detached; ends are
// reported on the returned channel.
func serveHost(t *testing.T, dir string) (sock string, ends <-chan ExecEnd) {
	t.Helper()
	srv := NewServer(hostSandbox{})
	if err := srv.ServeDetached(filepath.Join(dir, "detached")); err != nil {
		t.Fatal(err)
	}
	ch := make(chan ExecEnd, 16)
	srv.Audit = func(e ExecEnd) { ch <- e }
	sock = filepath.Join(dir, "sock")
	lfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(lfd, &unix.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(lfd, 16); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(lfd) }()
	t.Cleanup(func() {
		unix.Shutdown(lfd, unix.SHUT_RDWR)
		unix.Close(lfd)
		<-done
		srv.Close()
	})
	return sock, ch
}

func dial(t *testing.T, sock string) *Client {
	t.Helper()
	c, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitEnded polls a detached command until it is no longer running.
func waitEnded(t *testing.T, c *Client, id string) sandbox.DetachedCommand {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ds, err := c.Detached(ctx, id)
		if err != nil || len(ds) != 1 {
			t.Fatalf("status of %s: %v %v", id, ds, err)
		}
		if ds[0].Status != sandbox.DetachedRunning {
			return ds[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still running: %+v", id, ds[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestDetachedOutlivesItsClient(t *testing.T) {
	dir := t.TempDir()
	sock, ends := serveHost(t, dir)
	ctx := context.Background()
	c1 := dial(t, sock)
	d, err := c1.ExecDetached(ctx, ExecRequest{Args: []string{"sh", "-c", "echo start; sleep 0.5; echo end; echo oops >&2; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	if sandbox.ValidDetachedID(d.ID) != nil || d.Status != sandbox.DetachedRunning || d.Pid <= 0 || d.ExitCode != nil {
		t.Fatalf("started: %+v", d)
	}
	// The client that started it goes; the command does not.
	c1.Close()
	c2 := dial(t, sock)
	defer c2.Close()
	got := waitEnded(t, c2, d.ID)
	if got.Status != sandbox.DetachedFailed || got.ExitCode == nil || *got.ExitCode != 3 || got.FinishedAt == nil ||
		got.StdoutBytes != int64(len("start\nend\n")) || got.StderrBytes != 5 {
		t.Errorf("ended: %+v", got)
	}
	var out bytes.Buffer
	if _, err := c2.DetachedLogs(ctx, d.ID, "stdout", 0, &out); err != nil || out.String() != "start\nend\n" {
		t.Errorf("stdout: %q %v", out.String(), err)
	}
	out.Reset()
	if _, err := c2.DetachedLogs(ctx, d.ID, "stdout", 6, &out); err != nil || out.String() != "end\n" {
		t.Errorf("stdout from 6: %q %v", out.String(), err)
	}
	out.Reset()
	if n, err := c2.DetachedLogs(ctx, d.ID, "stdout", 10, &out); err != nil || n != 0 || out.Len() != 0 {
		t.Errorf("stdout from its end: %q %v", out.String(), err)
	}
	if _, err := c2.DetachedLogs(ctx, d.ID, "stdout", 11, &out); !errors.Is(err, sandbox.ErrLogOffset) || out.Len() != 0 {
		t.Errorf("past the end: %q %v", out.String(), err)
	}
	if _, err := c2.DetachedLogs(ctx, d.ID, "stderr", 0, &out); err != nil || out.String() != "oops\n" {
		t.Errorf("stderr: %q %v", out.String(), err)
	}
	for _, bad := range []string{"0123456789abcdef", "../../etc", ""} {
		if _, err := c2.DetachedLogs(ctx, bad, "stdout", 0, &out); !errors.Is(err, sandbox.ErrDetachedNotFound) {
			t.Errorf("logs of %q: %v", bad, err)
		}
	}
	if _, err := c2.DetachedLogs(ctx, d.ID, "../sock", 0, &out); err == nil {
		t.Errorf("a stream outside stdout and stderr was read")
	}
	select {
	case e := <-ends:
		if e.ExitCode != 3 || !strings.Contains(e.Reason, d.ID) {
			t.Errorf("audited end: %+v", e)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("the end was not audited")
	}
	all, err := c2.Detached(ctx, "")
	if err != nil || len(all) != 1 || all[0].ID != d.ID {
		t.Errorf("list: %+v %v", all, err)
	}
}

func TestDetachedKillAndTimeout(t *testing.T) {
	sock, _ := serveHost(t, t.TempDir())
	ctx := context.Background()
	c := dial(t, sock)
	defer c.Close()
	d, err := c.ExecDetached(ctx, ExecRequest{Args: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := c.KillDetached(ctx, d.ID)
	if err != nil || k.Status != sandbox.DetachedFailed || k.ExitCode == nil || *k.ExitCode != 137 || k.Reason != "killed" {
		t.Fatalf("kill: %+v %v", k, err)
	}
	if alive(d.Pid) {
		t.Errorf("killed command %d still runs", d.Pid)
	}
	// Killing it again answers its record.
	if k2, err := c.KillDetached(ctx, d.ID); err != nil || *k2.ExitCode != 137 {
		t.Errorf("second kill: %+v %v", k2, err)
	}
	if _, err := c.KillDetached(ctx, "00000000000000ff"); !errors.Is(err, sandbox.ErrDetachedNotFound) {
		t.Errorf("kill unknown: %v", err)
	}
	start := time.Now()
	d, err = c.ExecDetached(ctx, ExecRequest{Args: []string{"sleep", "100"}, TimeoutMS: 300})
	if err != nil {
		t.Fatal(err)
	}
	got := waitEnded(t, c, d.ID)
	if got.Reason != "timed out" || got.ExitCode == nil || *got.ExitCode != 137 || time.Since(start) > 15*time.Second {
		t.Errorf("timed out: %+v", got)
	}
}

func TestDetachedLogCap(t *testing.T) {
	sock, _ := serveHost(t, t.TempDir())
	ctx := context.Background()
	c := dial(t, sock)
	defer c.Close()
	// 1 MiB more than the cap: the command must not block on its pipe.
	d, err := c.ExecDetached(ctx, ExecRequest{Args: []string{"sh", "-c", "head -c " + strconv.Itoa(sandbox.DetachedLogCap+1<<20) + " /dev/zero; echo done >&2"}})
	if err != nil {
		t.Fatal(err)
	}
	got := waitEnded(t, c, d.ID)
	if *got.ExitCode != 0 || got.Status != sandbox.DetachedCompleted {
		t.Fatalf("ended: %+v", got)
	}
	want := int64(sandbox.DetachedLogCap + len(sandbox.DetachedLogMarker))
	deadline := time.Now().Add(10 * time.Second)
	for {
		var out bytes.Buffer
		n, err := c.DetachedLogs(ctx, d.ID, "stdout", sandbox.DetachedLogCap-4, &out)
		if err == nil && n == int64(4+len(sandbox.DetachedLogMarker)) {
			if out.String() != "\x00\x00\x00\x00"+sandbox.DetachedLogMarker {
				t.Errorf("tail: %q", out.String())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stdout not %d bytes: %d %v", want, n+sandbox.DetachedLogCap-4, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestDetachedAfterRestart(t *testing.T) {
	dir := t.TempDir()
	sock, _ := serveHost(t, dir)
	ctx := context.Background()
	c := dial(t, sock)
	d, err := c.ExecDetached(ctx, ExecRequest{Args: []string{"sh", "-c", "echo kept; exec sleep 100"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The first server's record ends before the directory goes.
	defer waitEnded(t, c, d.ID)
	defer syscall.Kill(d.Pid, syscall.SIGKILL)
	// A new server of the same directory (the sandbox started again):
	// the command it did not see end is failed, "sandbox stopped".
	srv := NewServer(hostSandbox{})
	if err := srv.ServeDetached(filepath.Join(dir, "detached")); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	cmd := srv.det.cmds[d.ID]
	if cmd == nil {
		t.Fatalf("not reloaded: %v", srv.det.cmds)
	}
	if got := cmd.snapshot(); got.Status != sandbox.DetachedFailed || got.Reason != "sandbox stopped" || got.ExitCode != nil {
		t.Errorf("reloaded: %+v", got)
	}
}

// TestClientGoneKillsCommand: a foreground command whose client dies
// is killed by the server, and its end is reported.
func TestClientGoneKillsCommand(t *testing.T) {
	dir := t.TempDir()
	sock, ends := serveHost(t, dir)
	c := dial(t, sock)
	pidFile := filepath.Join(dir, "pid")
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	go func() {
		_, _ = c.Exec(context.Background(), ExecRequest{Args: []string{"sh", "-c", "echo $$ > " + pidFile + "; exec sleep 100"}}, devnull, os.Stderr, os.Stderr, nil)
	}()
	var pid int
	for deadline := time.Now().Add(10 * time.Second); ; {
		if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	c.Close() // the client dies
	select {
	case e := <-ends:
		if e.Reason != "client gone" || e.ExitCode != 137 || len(e.Args) != 3 {
			t.Errorf("end: %+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the command's end was not reported: it still runs")
	}
	if alive(pid) {
		t.Errorf("command %d still runs after its client went", pid)
	}
}

// TestDetachedPrune: ended commands past maxDetachedKept are forgotten
// with their files, oldest first; running ones never.
func TestDetachedPrune(t *testing.T) {
	dir := t.TempDir()
	sock, _ := serveHost(t, dir)
	ctx := context.Background()
	c := dial(t, sock)
	defer c.Close()
	long, err := c.ExecDetached(ctx, ExecRequest{Args: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.KillDetached(ctx, long.ID)
	var ids []string
	for i := 0; i < maxDetachedKept+3; i++ {
		d, err := c.ExecDetached(ctx, ExecRequest{Args: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		waitEnded(t, c, d.ID)
		ids = append(ids, d.ID)
	}
	// The next start prunes.
	last, err := c.ExecDetached(ctx, ExecRequest{Args: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	waitEnded(t, c, last.ID)
	all, err := c.Detached(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, d := range all {
		have[d.ID] = true
	}
	if !have[long.ID] || !have[last.ID] || have[ids[0]] || have[ids[1]] || have[ids[2]] || !have[ids[4]] || len(all) > maxDetachedKept+2 {
		t.Errorf("after pruning: %d kept; running kept %v; oldest gone %v", len(all), have[long.ID], !have[ids[0]])
	}
	if _, err := os.Stat(filepath.Join(dir, "detached", ids[0])); !os.IsNotExist(err) {
		t.Errorf("a forgotten command's directory is left: %v", err)
	}
}

// TestDetachedLimit: however many clients ask at once, at most
// sandbox.MaxDetachedRunning detached commands run; the rest are refused
// with ErrDetachedLimit, and a place freed by a command that ended is
// given again.
func TestDetachedLimit(t *testing.T) {
	sock, _ := serveHost(t, t.TempDir())
	ctx := context.Background()
	const asks = sandbox.MaxDetachedRunning + 16
	var mu sync.Mutex
	var started []string
	refused := 0
	var wg sync.WaitGroup
	for i := 0; i < asks; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dial(t, sock)
			defer c.Close()
			d, err := c.ExecDetached(ctx, ExecRequest{Args: []string{"sleep", "60"}})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				started = append(started, d.ID)
			case errors.Is(err, sandbox.ErrDetachedLimit):
				refused++
			default:
				t.Errorf("detach: %v", err)
			}
		}()
	}
	wg.Wait()
	c := dial(t, sock)
	defer c.Close()
	t.Cleanup(func() {
		for _, id := range started {
			_, _ = c.KillDetached(ctx, id)
		}
	})
	if len(started) != sandbox.MaxDetachedRunning || refused != asks-sandbox.MaxDetachedRunning {
		t.Fatalf("%d started and %d refused of %d asks, want %d started", len(started), refused, asks, sandbox.MaxDetachedRunning)
	}
	if _, err := c.ExecDetached(ctx, ExecRequest{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrDetachedLimit) || !strings.Contains(err.Error(), "--kill") {
		t.Fatalf("one more: %v, want ErrDetachedLimit saying how to free a place", err)
	}
	if _, err := c.KillDetached(ctx, started[0]); err != nil {
		t.Fatal(err)
	}
	d, err := c.ExecDetached(ctx, ExecRequest{Args: []string{"true"}})
	if err != nil {
		t.Fatalf("after one ended: %v", err)
	}
	waitEnded(t, c, d.ID)
}

package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv/kubelab"
)

// waitDetached polls command id until its status is not running.
func waitDetached(t *testing.T, c *conn, id string) sandbox.DetachedCommand {
	t.Helper()
	ctx := context.Background()
	var d sandbox.DetachedCommand
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ds, err := c.Detached(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if d = ds[0]; d.Status != sandbox.DetachedRunning {
			return d
		}
	}
	t.Fatalf("detached command %s still runs: %+v", id, d)
	return d
}

func detachedLog(t *testing.T, c *conn, id, stream string, offset int64) string {
	t.Helper()
	var b bytes.Buffer
	n, err := c.DetachedLogs(context.Background(), id, stream, offset, &b)
	if err != nil {
		t.Fatalf("%s of %s from %d: %v", stream, id, offset, err)
	}
	if n != int64(b.Len()) {
		t.Errorf("%s of %s: %d bytes said, %d written", stream, id, n, b.Len())
	}
	return b.String()
}

// TestNodeDetached: detached commands in a running pod, through the
// exec API only. A command runs on after the exec that started it has
// ended, with its environment, working directory and arguments as given
// (quotes, $(...), newlines reach it literally, no shell reads them);
// its output is read by stream and offset; its exit status, a timeout
// and a kill (of its whole process group) are recorded as the SDKs know
// them; the log cap holds; a later connection (a new server) reads the
// same records; a command whose supervisor is killed is reported
// failed; and it all works as the restrictive profile's non-root user
// on a read-only root.
func TestNodeDetached(t *testing.T) {
	b := nodeBackend(t, Options{NoUserNamespace: true})
	ctx := context.Background()
	running(t, b, &Request{Name: "det", Image: kubelab.TestImage, Profile: mustProfile(t, "moderate")})
	c := &conn{b: b, name: "det"}

	// A long command, with environment and working directory.
	d, err := c.ExecDetached(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo out $X; pwd; echo err >&2; sleep 1001 & exec sleep 1002"},
		Env: []string{"X=2"}, Workdir: "/etc"})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.ID) != 16 || d.Pid < 2 || d.Status != sandbox.DetachedRunning || d.ExitCode != nil || d.StartedAt.IsZero() || len(d.Command) != 3 {
		t.Fatalf("started: %+v", d)
	}
	for i := 0; i < 100 && detachedLog(t, c, d.ID, "stderr", 0) != "err\n"; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if o, e := detachedLog(t, c, d.ID, "stdout", 0), detachedLog(t, c, d.ID, "stderr", 0); o != "out 2\n/etc\n" || e != "err\n" {
		t.Errorf("stdout %q, stderr %q", o, e)
	}
	if o := detachedLog(t, c, d.ID, "stdout", 4); o != "2\n/etc\n" {
		t.Errorf("stdout from 4: %q", o)
	}
	if o := detachedLog(t, c, d.ID, "stdout", 11); o != "" {
		t.Errorf("stdout from its end: %q", o)
	}
	var sink bytes.Buffer
	if _, err := c.DetachedLogs(ctx, d.ID, "stdout", 12, &sink); !errors.Is(err, sandbox.ErrLogOffset) || sink.Len() != 0 {
		t.Errorf("stdout from past its end: %v, %q", err, sink.String())
	}
	// The exec that started it ended long ago: still running, its pid
	// the command's.
	time.Sleep(time.Second)
	if code, o, _ := run(t, b, "det", "", "cat", "/proc/"+strconv.Itoa(d.Pid)+"/cmdline"); code != 0 || o != "sleep\x001002\x00" {
		t.Errorf("pid %d: %d %q", d.Pid, code, o)
	}
	// A later connection, as a server started afresh, finds it.
	c2 := &conn{b: b, name: "det"}
	ds, err := c2.Detached(ctx, "")
	if err != nil || len(ds) != 1 || ds[0].ID != d.ID || ds[0].Status != sandbox.DetachedRunning || ds[0].Pid != d.Pid ||
		!ds[0].StartedAt.Equal(d.StartedAt) || strings.Join(ds[0].Command, " ") != strings.Join(d.Command, " ") || ds[0].StdoutBytes != 11 || ds[0].StderrBytes != 4 {
		t.Fatalf("listed anew: %+v %v", ds, err)
	}
	k, err := c2.KillDetached(ctx, d.ID)
	if err != nil || k.Status != sandbox.DetachedFailed || k.ExitCode == nil || *k.ExitCode != 137 || k.Reason != "killed" || k.FinishedAt == nil {
		t.Fatalf("kill: %+v %v", k, err)
	}
	// The whole group went: the background sleep too.
	if code, o, _ := run(t, b, "det", "", "sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"); code != 0 || strings.Contains(o, "sleep 100") {
		t.Errorf("after the kill: %q", o)
	}
	if again, err := c.KillDetached(ctx, d.ID); err != nil || again.Status != k.Status || *again.ExitCode != 137 {
		t.Errorf("kill of an ended command: %+v %v", again, err)
	}

	// Hostile arguments run literally, not as shell.
	arg := "a b'c\"d $(touch /tmp/pwned) `touch /tmp/pwned2` ; touch /tmp/pwned3\nsecond line\\n $X *"
	h, err := c.ExecDetached(ctx, sandbox.ExecRequest{Args: []string{"printf", "%s|", arg, "-n", "$(id)"}, Env: []string{"X=$(touch /tmp/pwned4)"}})
	if err != nil {
		t.Fatal(err)
	}
	if e := waitDetached(t, c, h.ID); e.Status != sandbox.DetachedCompleted || e.ExitCode == nil || *e.ExitCode != 0 || e.Reason != "" || e.FinishedAt == nil || e.FinishedAt.Before(e.StartedAt) {
		t.Errorf("hostile args: %+v", e)
	}
	if o := detachedLog(t, c, h.ID, "stdout", 0); o != arg+"|-n|$(id)|" {
		t.Errorf("hostile args printed %q", o)
	}
	for _, p := range []string{"/tmp/pwned", "/tmp/pwned2", "/tmp/pwned3", "/tmp/pwned4"} {
		if code, _, _ := run(t, b, "det", "", "test", "-e", p); code == 0 {
			t.Errorf("an argument ran as shell: %s exists", p)
		}
	}
	// Exit statuses, a timeout, a command that is not there.
	for _, tc := range []struct {
		args    []string
		timeout time.Duration
		status  string
		code    int
		reason  string
	}{
		{[]string{"true"}, 0, sandbox.DetachedCompleted, 0, ""},
		{[]string{"sh", "-c", "exit 3"}, 0, sandbox.DetachedFailed, 3, ""},
		{[]string{"sh", "-c", "kill -TERM $$"}, 0, sandbox.DetachedFailed, 143, ""},
		{[]string{"sleep", "1003"}, 1500 * time.Millisecond, sandbox.DetachedFailed, 137, "timed out"},
	} {
		x, err := c.ExecDetached(ctx, sandbox.ExecRequest{Args: tc.args, Timeout: tc.timeout})
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if e := waitDetached(t, c, x.ID); e.Status != tc.status || e.ExitCode == nil || *e.ExitCode != tc.code || e.Reason != tc.reason {
			t.Errorf("%q: %+v, want %s %d %q", tc.args, e, tc.status, tc.code, tc.reason)
		}
	}
	if _, err := c.ExecDetached(ctx, sandbox.ExecRequest{Args: []string{"no-such-command"}}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a command that is not there: %v", err)
	}
	if _, err := c.ExecDetached(ctx, sandbox.ExecRequest{Args: []string{"/etc/passwd"}}); !errors.Is(err, sandbox.ErrCannotInvoke) {
		t.Errorf("a file that cannot run: %v", err)
	}
	if _, err := c.Detached(ctx, "0123456789abcdef"); !errors.Is(err, sandbox.ErrDetachedNotFound) {
		t.Errorf("an unknown id: %v", err)
	}
	if _, err := c.DetachedLogs(ctx, "0123456789abcdef", "stdout", 0, &sink); !errors.Is(err, sandbox.ErrDetachedNotFound) {
		t.Errorf("logs of an unknown id: %v", err)
	}
	if _, err := c.Detached(ctx, "../../etc/x"); !errors.Is(err, sandbox.ErrInvalidID) {
		t.Errorf("a malformed id: %v", err)
	}

	// The cap: past DetachedLogCap the stream ends with the marker,
	// and the command is not held up by what is dropped.
	big, err := c.ExecDetached(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "head -c 20000000 /dev/zero; echo done >&2"}})
	if err != nil {
		t.Fatal(err)
	}
	e := waitDetached(t, c, big.ID)
	want := int64(sandbox.DetachedLogCap + len(sandbox.DetachedLogMarker))
	if e.Status != sandbox.DetachedCompleted || e.StdoutBytes != want || e.StderrBytes != 5 {
		t.Errorf("past the cap: %+v, want %d bytes of stdout", e, want)
	}
	if o := detachedLog(t, c, big.ID, "stdout", sandbox.DetachedLogCap-3); o != "\x00\x00\x00"+sandbox.DetachedLogMarker {
		t.Errorf("the end of a capped stream: %q", o)
	}
	if o := detachedLog(t, c, big.ID, "stdout", sandbox.DetachedLogCap+5); o != sandbox.DetachedLogMarker[5:] {
		t.Errorf("inside the marker: %q", o)
	}
	if _, err := c.DetachedLogs(ctx, big.ID, "stdout", want+1, &sink); !errors.Is(err, sandbox.ErrLogOffset) {
		t.Errorf("past a capped stream's end: %v", err)
	}
	if o := detachedLog(t, c, big.ID, "stdout", 0); int64(len(o)) != want {
		t.Errorf("the whole capped stream: %d bytes", len(o))
	}

	// A command whose supervisor was killed is reported failed.
	sv, err := c.ExecDetached(ctx, sandbox.ExecRequest{Args: []string{"sleep", "1004"}})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, e := run(t, b, "det", "", "sh", "-c", `read -r p _ < "$1/sup" && kill -KILL "$p" && kill -KILL "$2"`, "sh", DetachedDir+"/"+sv.ID, strconv.Itoa(sv.Pid)); code != 0 {
		t.Fatalf("killing the supervisor: %d %s", code, e)
	}
	if e := waitDetached(t, c, sv.ID); e.Status != sandbox.DetachedFailed || e.ExitCode != nil || e.Reason != "supervisor gone" {
		t.Errorf("its supervisor killed: %+v", e)
	}
	all, err := c.Detached(ctx, "")
	if err != nil || len(all) != 8 {
		t.Fatalf("list: %d %v", len(all), err)
	}
	for i := 1; i < len(all); i++ {
		if all[i].StartedAt.Before(all[i-1].StartedAt) {
			t.Errorf("not oldest first: %+v", all)
		}
	}

	// The restrictive profile: non-root, read-only root, /tmp an
	// emptyDir.
	running(t, b, &Request{Name: "det-r", Image: kubelab.TestImage, Profile: mustProfile(t, "restrictive")})
	cr := &conn{b: b, name: "det-r"}
	r, err := cr.ExecDetached(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "id -u; exec sleep 1005"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100 && detachedLog(t, cr, r.ID, "stdout", 0) == ""; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if o := detachedLog(t, cr, r.ID, "stdout", 0); o != strconv.Itoa(NonRootUID)+"\n" {
		t.Errorf("restrictive: %q", o)
	}
	if k, err := cr.KillDetached(ctx, r.ID); err != nil || k.Status != sandbox.DetachedFailed || *k.ExitCode != 137 {
		t.Errorf("restrictive kill: %+v %v", k, err)
	}
}

// TestNodeDetachedStopStart: stop deletes the sandbox's pod and start
// makes a new one; the detached commands of the first pod are still
// listed after, the one that was running failed ("sandbox stopped", no
// exit code), their output gone with the pod, beside those of the new
// pod.
func TestNodeDetachedStopStart(t *testing.T) {
	b := nodeBackend(t, Options{NoUserNamespace: true})
	_, _ = shared.Node(t)
	ctx := context.Background()
	s := NewSandboxes(b, t.TempDir())
	if err := s.Create(ctx, &sandbox.Info{Name: "dss"}, &sandbox.Spec{Image: kubelab.TestImage, Profile: "moderate", Network: sandbox.Network{Mode: sandbox.NetworkNone}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Remove(context.Background(), "dss", true) })
	if _, err := s.Start(ctx, "dss"); err != nil {
		t.Fatal(err)
	}
	sc, err := s.Connect(ctx, "dss")
	if err != nil {
		t.Fatal(err)
	}
	c := sc.(*conn)
	long, err := c.ExecDetached(ctx, sandbox.ExecRequest{Args: []string{"sleep", "1006"}})
	if err != nil {
		t.Fatal(err)
	}
	short, err := c.ExecDetached(ctx, sandbox.ExecRequest{Args: []string{"echo", "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	waitDetached(t, c, short.ID)
	if _, err := s.Stop(ctx, "dss", "stopped by the test"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start(ctx, "dss"); err != nil {
		t.Fatal(err)
	}
	sc, err = s.Connect(ctx, "dss")
	if err != nil {
		t.Fatal(err)
	}
	c = sc.(*conn)
	fresh, err := c.ExecDetached(ctx, sandbox.ExecRequest{Args: []string{"sleep", "1007"}})
	if err != nil {
		t.Fatal(err)
	}
	all, err := c.Detached(ctx, "")
	if err != nil || len(all) != 3 || all[0].ID != long.ID || all[1].ID != short.ID || all[2].ID != fresh.ID {
		t.Fatalf("after stop and start: %+v %v", all, err)
	}
	if d := all[0]; d.Status != sandbox.DetachedFailed || d.Reason != "sandbox stopped" || d.ExitCode != nil || d.FinishedAt == nil || d.Pid != long.Pid {
		t.Errorf("running at the stop: %+v", d)
	}
	if d := all[1]; d.Status != sandbox.DetachedCompleted || d.ExitCode == nil || *d.ExitCode != 0 || d.StdoutBytes != 0 {
		t.Errorf("ended before the stop: %+v", d)
	}
	if d := all[2]; d.Status != sandbox.DetachedRunning {
		t.Errorf("of the new pod: %+v", d)
	}
	if o := detachedLog(t, c, short.ID, "stdout", 0); o != "" {
		t.Errorf("output of an earlier pod: %q", o)
	}
	var sink bytes.Buffer
	if _, err := c.DetachedLogs(ctx, short.ID, "stdout", 1, &sink); !errors.Is(err, sandbox.ErrLogOffset) {
		t.Errorf("output of an earlier pod from 1: %v", err)
	}
	if d, err := c.KillDetached(ctx, long.ID); err != nil || d.Reason != "sandbox stopped" {
		t.Errorf("kill of a command of an earlier pod: %+v %v", d, err)
	}
	if d, err := c.KillDetached(ctx, fresh.ID); err != nil || d.Status != sandbox.DetachedFailed || d.Reason != "killed" {
		t.Errorf("kill: %+v %v", d, err)
	}

	// At most sandbox.MaxDetachedRunning run at once, also when the
	// starts come together.
	n := sandbox.MaxDetachedRunning + 2
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			_, err := c.ExecDetached(ctx, sandbox.ExecRequest{Args: []string{"sleep", "1100"}})
			errs <- err
		}()
	}
	ok, limited := 0, 0
	for i := 0; i < n; i++ {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, sandbox.ErrDetachedLimit):
			limited++
		default:
			t.Errorf("start: %v", err)
		}
	}
	if ok != sandbox.MaxDetachedRunning || limited != 2 {
		t.Errorf("%d started, %d refused; want %d and 2", ok, limited, sandbox.MaxDetachedRunning)
	}
	// The per-sandbox lock of those starts went with them.
	if n := s.detaching.len(); n != 0 {
		t.Errorf("%d detached-start locks left after every start returned", n)
	}
}

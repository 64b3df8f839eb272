//go:build linux

package nomad

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/testenv"
	"github.com/agentkernel/agentkernel/internal/testenv/nomadlab"
	"github.com/agentkernel/agentkernel/test/testbin"
)

// TestExecDriverEndToEnd runs sandboxes as jobs of Nomad's exec driver
// on a real dev agent: create → running, exec (exit codes, stdout and
// stderr, stdin), files, list, a second create of the name refused,
// remove leaves no job.
func TestExecDriverEndToEnd(t *testing.T) {
	l := startLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	requireExecDriver(ctx, t, l)
	b := newBackend(t, l, Options{Driver: DriverExec})
	const name = "e2e-one"
	cleanupJob(t, b, name)
	if _, err := b.Create(ctx, &Request{Name: name, Labels: map[string]string{"team": "ml"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, &Request{Name: name}); !errors.Is(err, ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	if _, err := b.Wait(ctx, name); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code, err := b.Exec(ctx, name, []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 7"}, nil, &out, &errb)
	if err != nil || code != 7 || out.String() != "out\n" || errb.String() != "err\n" {
		t.Fatalf("exec: code %d err %v stdout %q stderr %q", code, err, out.String(), errb.String())
	}
	out.Reset()
	if code, err := b.Exec(ctx, name, []string{"/bin/cat"}, strings.NewReader("from stdin"), &out, nil); err != nil || code != 0 || out.String() != "from stdin" {
		t.Fatalf("exec stdin: %d %v %q", code, err, out.String())
	}
	data := []byte("line one\n\x00binary\xff")
	if err := b.WriteFile(ctx, name, "/tmp/a file; rm -rf /", data); err != nil {
		t.Fatal(err)
	}
	got, err := b.ReadFile(ctx, name, "/tmp/a file; rm -rf /", 1<<20)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %q, %v", got, err)
	}
	if _, err := b.ReadFile(ctx, name, "/tmp/a file; rm -rf /", 4); err == nil {
		t.Fatal("a file over the limit was read")
	}
	if _, err := b.ReadFile(ctx, name, "/nonexistent", 100); err == nil {
		t.Fatal("reading a missing file succeeded")
	}
	list, err := b.List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != name || list[0].Labels["team"] != "ml" || list[0].Driver != DriverExec {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := b.Remove(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.client.Jobs().Info(JobID(name), nil); err == nil || !isNotFound(err) {
		t.Fatalf("job still there after remove: %v", err)
	}
	if err := b.Remove(ctx, name); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second remove: %v", err)
	}
	if _, err := b.Exec(ctx, name, []string{"true"}, nil, nil, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("exec after remove: %v", err)
	}
}

// TestExecDriverNetworkNone is an attack: a sandbox made with --network
// none tries to reach a listener of the test on the host's loopback and
// must fail; the control sandbox (network full) reaches it, so the
// attack is not failing for another reason.
func TestExecDriverNetworkNone(t *testing.T) {
	l := startLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	requireExecDriver(ctx, t, l)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("secret-from-host\n"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	b := newBackend(t, l, Options{Driver: DriverExec})
	// bash's /dev/tcp, else busybox nc: whichever the node has.
	probe := fmt.Sprintf(`exec 3<>/dev/tcp/127.0.0.1/%d && cat <&3`, port)
	shell := "/bin/bash"
	if _, err := os.Stat(shell); err != nil {
		t.Skip("no /bin/bash on the node for the probe")
	}
	for _, tc := range []struct {
		name, network string
		reach         bool
	}{{"net-control", NetworkFull, true}, {"net-none", NetworkNone, false}} {
		cleanupJob(t, b, tc.name)
		if _, err := b.Create(ctx, &Request{Name: tc.name, Network: tc.network}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Wait(ctx, tc.name); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code, err := b.Exec(ctx, tc.name, []string{shell, "-c", probe}, nil, &out, &errb)
		if err != nil {
			t.Fatal(err)
		}
		reached := code == 0 && strings.Contains(out.String(), "secret-from-host")
		if reached != tc.reach {
			t.Fatalf("%s (network %s): reached the host's listener = %v (exit %d, %q %q)", tc.name, tc.network, reached, code, out.String(), errb.String())
		}
	}
}

// TestTTLReaped: a sandbox past its TTL is removed by Reap (its job
// purged); one without a TTL and a job that is not ours stay.
func TestTTLReaped(t *testing.T) {
	l := startLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	now := time.Now()
	b := newBackend(t, l, Options{Driver: DriverExec, Now: func() time.Time { return now }})
	for _, r := range []*Request{{Name: "ttl-short", TTL: time.Minute}, {Name: "ttl-none"}} {
		cleanupJob(t, b, r.Name)
		if _, err := b.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// A foreign job with our prefix but not our meta: never reaped.
	foreign := buildJob(b.jobOptions(), &Request{Name: "foreign"}, now)
	foreign.Meta = map[string]string{ExpiresMeta: now.Add(-time.Hour).Format(time.RFC3339)}
	if _, _, err := b.client.Jobs().Register(foreign, nil); err != nil {
		t.Fatal(err)
	}
	cleanupJob(t, b, "foreign")
	gone, err := b.Reap(ctx)
	if err != nil || len(gone) != 0 {
		t.Fatalf("reap before expiry: %v %v", gone, err)
	}
	s, err := b.Get(ctx, "ttl-short")
	if err != nil || !s.ExpiresAt.Equal(now.Add(time.Minute).Truncate(time.Second).UTC()) {
		t.Fatalf("get: %+v %v", s, err)
	}
	now = now.Add(2 * time.Minute)
	gone, err = b.Reap(ctx)
	if err != nil || len(gone) != 1 || gone[0] != "ttl-short" {
		t.Fatalf("reap: %v %v", gone, err)
	}
	if _, err := b.Get(ctx, "ttl-short"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("reaped sandbox still there: %v", err)
	}
	if _, err := b.Get(ctx, "ttl-none"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.client.Jobs().Info(JobID("foreign"), nil); err != nil {
		t.Fatalf("foreign job was touched: %v", err)
	}
	if err := b.Remove(ctx, "foreign"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("remove of a foreign job: %v", err)
	}
}

// TestHostileInputRefusedBeforeAnyRequest: names and fields that could
// become other jobs, flags or shell code are refused by the client
// alone (the address is a closed port: any request would fail
// differently).
func TestHostileInputRefusedBeforeAnyRequest(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + ln.Addr().String()
	ln.Close()
	b, err := New(Options{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, n := range []string{"", "-rf", "a/b", "../x", "A", "x y", "x;rm", "$(id)", "a\nb", "job*", strings.Repeat("a", MaxNameLen+1), "end-"} {
		if _, err := b.Create(ctx, &Request{Name: n}); err == nil || strings.Contains(err.Error(), "connection refused") {
			t.Errorf("create %q: %v, want refusal before any request", n, err)
		}
		for what, f := range map[string]func() error{
			"get":    func() error { _, err := b.Get(ctx, n); return err },
			"remove": func() error { return b.Remove(ctx, n) },
			"exec":   func() error { _, err := b.Exec(ctx, n, []string{"id"}, nil, nil, nil); return err },
			"wait":   func() error { _, err := b.Wait(ctx, n); return err },
		} {
			if err := f(); err == nil || strings.Contains(err.Error(), "connection refused") {
				t.Errorf("%s %q: %v", what, n, err)
			}
		}
	}
	for _, r := range []*Request{
		{Name: "ok", Profile: "root"},
		{Name: "ok", Network: "host"},
		{Name: "ok", Network: NetworkFiltered, AllowDomains: []string{"--privileged"}},
		{Name: "ok", AllowDomains: []string{"example.com"}},
		{Name: "ok", Image: "--image=evil"},
		{Name: "ok", Labels: map[string]string{"a.b": "x"}},
		{Name: "ok", MemoryMB: -1},
	} {
		if _, err := b.Create(ctx, r); err == nil || strings.Contains(err.Error(), "connection refused") {
			t.Errorf("create %+v: %v, want refusal", r, err)
		}
	}
	if _, err := New(Options{Driver: "raw_exec"}); err == nil {
		t.Error("raw_exec alone (no isolation) was accepted")
	}
	if _, err := New(Options{Namespace: "a/../b"}); err == nil {
		t.Error("a namespace with a slash was accepted")
	}
	// The unreachable agent is reported as such, with a hint.
	if _, err := b.Create(ctx, &Request{Name: "ok"}); err == nil || !strings.Contains(err.Error(), "no Nomad agent") {
		t.Errorf("create against no agent: %v", err)
	}
}

// TestAgentkernelDriverEndToEnd runs the default driver: raw_exec
// running the node's agentkernel-full (built from this tree), which makes
// a native sandbox of the host image and serves it in the foreground;
// exec goes through `agentkernel exec` inside the task. The attack part
// is network none: the native sandbox must not reach the test's loopback
// listener, while a command run by the task itself (outside the
// sandbox) does.
func TestAgentkernelDriverEndToEnd(t *testing.T) {
	l := startLab(t)
	ak := buildAgentkernel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dataDir := nodeDataDir(t, ak)
	b := newBackend(t, l, Options{NodeAgentkernel: ak, NodeDataDir: dataDir})
	const name = "native-one"
	cleanupJob(t, b, name)
	if _, err := b.Create(ctx, &Request{Name: name, Image: "host", Network: NetworkNone}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Wait(ctx, name); err != nil {
		t.Fatal(err)
	}
	// The task may run before the supervisor serves: retry exec briefly.
	var out, errb bytes.Buffer
	var code int
	var err error
	for i := 0; i < 100; i++ {
		out.Reset()
		errb.Reset()
		code, err = b.Exec(ctx, name, []string{"sh", "-c", "echo in; echo e >&2; exit 3"}, nil, &out, &errb)
		if err == nil && code == 3 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || code != 3 || out.String() != "in\n" || errb.String() != "e\n" {
		t.Fatalf("exec: %d %v %q %q", code, err, out.String(), errb.String())
	}
	if err := b.WriteFile(ctx, name, "/tmp/f", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if got, err := b.ReadFile(ctx, name, "/tmp/f", 100); err != nil || string(got) != "hello" {
		t.Fatalf("read: %q %v", got, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("secret-from-host\n"))
			c.Close()
		}
	}()
	probe := fmt.Sprintf(`exec 3<>/dev/tcp/127.0.0.1/%d && cat <&3`, ln.Addr().(*net.TCPAddr).Port)
	out.Reset()
	code, err = b.Exec(ctx, name, []string{"bash", "-c", probe}, nil, &out, nil)
	if err != nil || code == 0 || strings.Contains(out.String(), "secret") {
		t.Fatalf("the network-none sandbox reached the host: exit %d %v %q", code, err, out.String())
	}
	// Control: the same probe from the raw_exec task itself (not through
	// agentkernel exec) reaches the listener.
	alloc, _, err := b.runningAlloc(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	code, err = b.client.Allocations().Exec(ctx, alloc, TaskName, false, []string{"bash", "-c", probe}, bytes.NewReader(nil), &out, &bytes.Buffer{}, nil, nil)
	if err != nil || code != 0 || !strings.Contains(out.String(), "secret-from-host") {
		t.Fatalf("control probe from the task: %d %v %q", code, err, out.String())
	}
	// Stop: removing the job ends the task, whose exit removes the
	// native sandbox on the node.
	if err := b.Remove(ctx, name); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		out, _ := exec.Command(ak, "--data-dir", dataDir, "sandbox", "list", "--all").CombinedOutput()
		if !strings.Contains(string(out), name) {
			break
		}
		if i == 150 {
			t.Fatalf("the native sandbox outlived its job:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, _, err := b.client.Jobs().Info(JobID(name), nil); !isNotFound(err) {
		t.Fatalf("job still there after remove: %v", err)
	}

	// The other way round: a sandbox stopped on the node ends its task.
	const second = "native-two"
	cleanupJob(t, b, second)
	if _, err := b.Create(ctx, &Request{Name: second, Image: "host", Network: NetworkNone}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Wait(ctx, second); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		out, err := exec.Command(ak, "--data-dir", dataDir, "sandbox", "stop", second).CombinedOutput()
		if err == nil {
			break
		}
		if i == 100 {
			t.Fatalf("sandbox stop: %v %s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := 0; ; i++ {
		allocs, _, err := b.client.Jobs().Allocations(JobID(second), false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(allocs) == 1 && allocs[0].ClientStatus != "running" && allocs[0].ClientStatus != "pending" {
			break
		}
		if i == 150 {
			t.Fatalf("the task outlived its stopped sandbox: %+v", allocs[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func buildAgentkernel(t testing.TB) string {
	t.Helper()
	return testbin.Full(t)
}

// requireExecDriver ends the test when Nomad's exec driver cannot run
// here: on a cgroup v1 machine it never can (Nomad 1.11 needs the
// unified hierarchy), which is a skip even in strict mode; elsewhere an
// unhealthy driver is a missing prerequisite.
func requireExecDriver(ctx context.Context, t *testing.T, l *nomadlab.Lab) {
	t.Helper()
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		t.Skip("Nomad's exec driver needs cgroups v2 at /sys/fs/cgroup; this machine has v1")
	}
	if !l.DriverHealthy(ctx, "exec") {
		testenv.Missing(t, "the Nomad exec driver is not healthy on this machine")
	}
}

// TestConcurrentPurgeNotFound: a job purged by several callers at once
// (a stop's purge, a pool's reaper, a removal) answers the losers either
// 404 or, when it went between the server's look and its write, 500 "job
// not found"; both are "not found" here, so that a removal goes on to
// the sandbox's other jobs instead of stopping half-way (a removed
// pooled sandbox kept its name job so).
func TestConcurrentPurgeNotFound(t *testing.T) {
	l := startLab(t)
	b := newBackend(t, l, Options{})
	var fivehundreds int
	for round := 0; round < 10; round++ {
		job := buildJob(b.jobOptions(), &Request{Name: fmt.Sprintf("purge-%d", round)}, time.Now())
		if _, _, err := b.client.Jobs().Register(job, nil); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, err := b.client.Jobs().Deregister(*job.ID, true, nil)
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err == nil {
				continue
			}
			if strings.Contains(err.Error(), "500") {
				fivehundreds++
			}
			if !isNotFound(err) {
				t.Errorf("a concurrent purge's error is not taken for not found: %v", err)
			}
		}
	}
	t.Logf("concurrent purges: %d answered 500 job not found", fivehundreds)
}

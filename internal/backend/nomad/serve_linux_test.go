//go:build linux

package nomad

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv/nomadlab"
)

// serveSandboxes is the backend as `serve` holds it, over the lab, the
// node's agentkernel this tree's.
func serveSandboxes(t *testing.T, l *nomadlab.Lab) *Sandboxes {
	t.Helper()
	ak := buildAgentkernel(t)
	data := nodeDataDir(t, ak)
	return NewSandboxes(func() (ServeOptions, error) {
		return ServeOptions{Options: Options{Address: l.Address, NodeAgentkernel: ak, NodeDataDir: data}, StartTimeout: time.Minute}, nil
	})
}

func hostSpec(name, id string) *sandbox.Spec {
	return &sandbox.Spec{Name: name, ID: id, Image: "host", Profile: "moderate", Network: sandbox.Network{Mode: sandbox.NetworkNone}}
}

// execFds runs req through the instance as the agent server would, with
// pipes as its stdio, and returns its status and output.
func execFds(t *testing.T, sb agent.Sandbox, req *agent.ExecRequest, stdin string) (syscall.WaitStatus, string, string) {
	t.Helper()
	var fds [3]int
	var closers []*os.File
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	fds = [3]int{int(inR.Fd()), int(outW.Fd()), int(errW.Fd())}
	closers = append(closers, inR, outW, errW)
	p, err := sb.Exec(req, fds)
	for _, f := range closers {
		f.Close() // the instance keeps its own copies
	}
	if err != nil {
		t.Fatalf("exec %v: %v", req.Args, err)
	}
	go func() { inW.Write([]byte(stdin)); inW.Close() }()
	outc, errc := make(chan string), make(chan string)
	go func() { b, _ := io.ReadAll(outR); outc <- string(b) }()
	go func() { b, _ := io.ReadAll(errR); errc <- string(b) }()
	ws := p.Wait()
	return ws, <-outc, <-errc
}

// TestSandboxesBoot: a persistent sandbox booted as a job (the
// supervisor's view): commands with their status, streams, environment,
// directory and stdin; files written (parents made), read, listed,
// stated, deleted, tar streams both ways, a hostile archive kept inside
// the sandbox; a signal ends a command; Stop purges the job at once and
// the sandbox ends with it. A second boot of the same sandbox replaces
// a job its killed supervisor left; another sandbox's job is refused.
func TestSandboxesBoot(t *testing.T) {
	l := startLab(t)
	s := serveSandboxes(t, l)
	b, err := s.backend()
	if err != nil {
		t.Fatal(err)
	}
	cleanupJob(t, b, "boot")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	inst, err := s.Boot(ctx, hostSpec("boot", "id-1"), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("boot: %v", time.Since(start))
	i := inst.(*instance)
	ws, out, errs := execFds(t, i, &agent.ExecRequest{Args: []string{"sh", "-c", "echo $A; pwd; cat; echo e >&2; exit 3"}, Env: []string{"A=b"}, Workdir: "/tmp"}, "in\n")
	if ws.ExitStatus() != 3 || out != "b\n/tmp\nin\n" || errs != "e\n" {
		t.Errorf("exec: %v %q %q", ws, out, errs)
	}
	if _, err := i.Exec(&agent.ExecRequest{Args: []string{"true"}, Env: []string{"HOME"}}, [3]int{0, 1, 2}); err == nil {
		t.Errorf("an environment entry without a value (the node's own) was taken")
	}
	checkEnvOffCmdline(t, i)
	// A signal ends a long command.
	inR, _, _ := os.Pipe()
	_, outW, _ := os.Pipe()
	p, err := i.Exec(&agent.ExecRequest{Args: []string{"sleep", "600"}}, [3]int{int(inR.Fd()), int(outW.Fd()), int(outW.Fd())})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	_ = p.Signal(syscall.SIGTERM)
	done := make(chan syscall.WaitStatus, 1)
	go func() { done <- p.Wait() }()
	select {
	case ws := <-done:
		if !ws.Signaled() {
			t.Errorf("a signalled command: %v", ws)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("a signal did not end the command")
	}

	if n, err := i.WriteFile("/tmp/x/y/z.txt", 0o600, strings.NewReader("héllo")); err != nil || n != 6 {
		t.Fatalf("write: %d %v", n, err)
	}
	var buf bytes.Buffer
	if n, err := i.ReadFile("/tmp/x/y/z.txt", &buf); err != nil || n != 6 || buf.String() != "héllo" {
		t.Errorf("read: %d %q %v", n, buf.String(), err)
	}
	if e, err := i.Stat("/tmp/x/y/z.txt"); err != nil || e.Size != 6 || os.FileMode(e.Mode).Perm() != 0o600 || e.Name != "z.txt" {
		t.Errorf("stat: %+v %v", e, err)
	}
	if ents, err := i.List("/tmp/x"); err != nil || len(ents) != 1 || ents[0].Name != "y" || !os.FileMode(ents[0].Mode).IsDir() {
		t.Errorf("list: %+v %v", ents, err)
	}
	if _, err := i.ReadFile("/tmp/none", io.Discard); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("read of a missing file: %v", err)
	}
	if _, err := i.ReadFile("/tmp/x", io.Discard); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("read of a directory: %v", err)
	}
	if err := i.Delete("/tmp/x", false); err == nil {
		t.Errorf("a non-empty directory deleted without recursive")
	}
	if err := i.Delete("/tmp/x", true); err != nil {
		t.Errorf("delete: %v", err)
	}
	if _, err := i.Stat("/tmp/x"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stat after delete: %v", err)
	}
	if err := i.Delete("/tmp/x", true); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("delete of a missing path: %v", err)
	}
	// A tar stream out and back in elsewhere.
	ws, _, errs = execFds(t, i, &agent.ExecRequest{Args: []string{"sh", "-c", "mkdir -p /tmp/t/s && echo one > /tmp/t/s/f"}}, "")
	if ws.ExitStatus() != 0 {
		t.Fatalf("mkdir: %v %s", ws, errs)
	}
	buf.Reset()
	if err := i.TarOut("/tmp/t", &buf); err != nil {
		t.Fatal(err)
	}
	if err := i.TarIn("/tmp/back/new", &buf); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if _, err := i.ReadFile("/tmp/back/new/t/s/f", &buf); err != nil || buf.String() != "one\n" {
		t.Errorf("tar round trip: %q %v", buf.String(), err)
	}
	// Attack: an archive whose entries climb out through a link and
	// "..": the node's extraction keeps it inside the sandbox, and the
	// host's directory stays empty.
	outside := t.TempDir()
	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	for _, h := range []*tar.Header{
		{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "/"},
		{Name: "up" + outside + "/pwned", Typeflag: tar.TypeReg, Mode: 0o644, Size: 6},
		{Name: "../../../.." + outside + "/pwned2", Typeflag: tar.TypeReg, Mode: 0o644, Size: 6},
	} {
		_ = tw.WriteHeader(h)
		if h.Size > 0 {
			_, _ = tw.Write([]byte("pwned\n"))
		}
	}
	_ = tw.Close()
	_ = i.TarIn("/tmp", &evil)
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("a hostile archive wrote %v on the host", ents)
	}

	// A job of this name that is another sandbox's is never taken over.
	if _, err := s.Boot(ctx, hostSpec("boot", "id-2"), t.TempDir(), nil); !errors.Is(err, ErrExists) {
		t.Errorf("a second sandbox of the name: %v", err)
	}
	// The same sandbox booting again (its supervisor was killed) replaces
	// its own job.
	start = time.Now()
	again, err := s.Boot(ctx, hostSpec("boot", "id-1"), t.TempDir(), nil)
	if err != nil {
		t.Fatalf("reboot over a left job: %v", err)
	}
	select {
	case <-i.Done():
		t.Logf("the old instance ended: %q", i.ExitReason())
	case <-time.After(30 * time.Second):
		t.Errorf("the replaced job's instance did not end")
	}
	t.Logf("reboot: %v", time.Since(start))
	a := again.(*instance)
	// The instance's watch is in its blocking query by now.
	time.Sleep(2 * time.Second)
	start = time.Now()
	a.Stop()
	t.Logf("stop: %v", time.Since(start))
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("stop took %v", d)
	}
	select {
	case <-a.Done():
	default:
		t.Errorf("not done after Stop")
	}
	if r := a.ExitReason(); r != "" {
		t.Errorf("a stop asked for has the reason %q", r)
	}
	a.Close()
	if _, err := b.Get(ctx, "boot"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the job after stop: %v", err)
	}
}

// TestSandboxesRun: a run is a job of its own, purged after: its status,
// output, stdin, a timeout (124), and nothing left; what a job cannot
// carry is refused before any request.
func TestSandboxesRun(t *testing.T) {
	l := startLab(t)
	s := serveSandboxes(t, l)
	b, _ := s.backend()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	spec := hostSpec("", "")
	spec.Args, spec.Interactive, spec.Env = []string{"sh", "-c", "cat; echo $V; exit 4"}, true, []string{"V=w"}
	var out, errb bytes.Buffer
	res, err := s.Run(ctx, spec, sandbox.Stdio{Stdin: strings.NewReader("in\n"), Stdout: &out, Stderr: &errb})
	if err != nil || res.ExitCode != 4 || out.String() != "in\nw\n" {
		t.Errorf("run: %+v %v %q %q", res, err, out.String(), errb.String())
	}
	spec = hostSpec("", "")
	spec.Args, spec.Resources.Timeout = []string{"sleep", "600"}, 2*time.Second
	if res, err := s.Run(ctx, spec, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard}); err != nil || res.ExitCode != 124 || !res.TimedOut {
		t.Errorf("a run past its timeout: %+v %v", res, err)
	}
	if l, err := b.List(ctx); err != nil || len(l) != 0 {
		t.Errorf("runs left jobs: %+v %v", l, err)
	}

	// Refusals, before any request.
	for what, mod := range map[string]func(*sandbox.Spec){
		"ports": func(s *sandbox.Spec) { s.Network.Ports = []sandbox.PortMapping{{HostPort: 8080, SandboxPort: 80}} },
		"blocked": func(s *sandbox.Spec) {
			s.Network.Mode, s.Network.BlockDomains = sandbox.NetworkFull, []string{"x.example"}
		},
		"ssh": func(s *sandbox.Spec) { s.SSH = &sandbox.SSHAccess{} },
		"secrets": func(s *sandbox.Spec) {
			s.SecretBindings = &sandbox.SecretBindings{Bindings: []sandbox.SecretRef{{Key: "k", Host: "h"}}}
		},
		"volume": func(s *sandbox.Spec) {
			s.Mounts = []sandbox.Mount{{Kind: sandbox.MountBind, Source: "/etc", Dest: "/etc2"}}
		},
		"name":    func(s *sandbox.Spec) { s.Name = "Bad_Name" },
		"profile": func(s *sandbox.Spec) { s.Profile = "custom" },
		"image":   func(s *sandbox.Spec) { s.Image = "--privileged" },
	} {
		sp := hostSpec("", "")
		sp.Args = []string{"true"}
		mod(sp)
		if err := s.Check(sp); err == nil {
			t.Errorf("%s: not refused", what)
		}
	}
	exec := NewSandboxes(func() (ServeOptions, error) {
		return ServeOptions{Options: Options{Address: l.Address, Driver: DriverExec}}, nil
	})
	if err := exec.Check(hostSpec("", "")); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("the exec driver: %v", err)
	}
}

// TestServePool: the warm pools of `serve` on a real dev agent. The
// first preparation reaps the jobs a dead server's pool left (its lease
// is gone); a prepared sandbox runs its one command and its job is
// purged; a persistent sandbox of the same spec booted by a supervisor
// takes a waiting pool job and works as any; the prepared sandbox whose
// job it took runs its command in a fresh job instead; Close purges.
func TestServePool(t *testing.T) {
	l := startLab(t)
	s := serveSandboxes(t, l)
	b, err := s.backend()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cleanupJob(t, b, "pooled")
	// A dead server's leftover: its owner holds no lease.
	r := s.request(hostSpec("", ""), "pool")
	dead, err := b.registerPoolJob(ctx, &Pool{Name: "d-" + b.specDigest(r), Request: *r, Owner: "serve-dead"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _, _ = b.client.Jobs().Deregister(*dead.ID, true, nil) })
	// (Answering first: a job stopped while its node still makes the
	// sandbox would race the test's removal of the node's directory.)
	if _, err := b.readyJob(ctx, *dead.ID, dead.Meta[NodeNameMeta], 3*time.Minute); err != nil {
		t.Fatal(err)
	}

	spec := hostSpec("", "")
	p1, err := s.Prepare(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p1.Close)
	if j, _, err := b.client.Jobs().Info(*dead.ID, nil); err == nil && (j.Stop == nil || !*j.Stop) {
		t.Errorf("the dead server's pool job was not reaped at start")
	}
	p2, err := s.Prepare(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p2.Close)
	job1 := p1.(*prepared).job
	var out, errb bytes.Buffer
	res, err := p1.Run(ctx, []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, sandbox.Stdio{Stdout: &out, Stderr: &errb}, nil)
	if err != nil || res.ExitCode != 3 || out.String() != "out\n" || errb.String() != "err\n" {
		t.Fatalf("prepared run: %+v %v %q %q", res, err, out.String(), errb.String())
	}
	if j, _, err := b.client.Jobs().Info(job1, nil); err == nil && (j.Stop == nil || !*j.Stop) {
		t.Errorf("the prepared sandbox's job %s runs on after its command", job1)
	}
	if _, err := p1.Run(ctx, []string{"true"}, sandbox.Stdio{}, nil); err == nil {
		t.Errorf("a prepared sandbox ran a second command")
	}

	// A supervisor boots a sandbox of the same spec: it takes p2's job.
	start := time.Now()
	inst, err := s.Boot(ctx, hostSpec("pooled", "id-pooled"), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("boot from the pool: %v", time.Since(start))
	i := inst.(*instance)
	if i.job != p2.(*prepared).job {
		t.Fatalf("boot ran in job %s, not the waiting pool job %s", i.job, p2.(*prepared).job)
	}
	ws, o, _ := execFds(t, i, &agent.ExecRequest{Args: []string{"sh", "-c", "echo $A > /tmp/f; cat /tmp/f"}, Env: []string{"A=mine"}}, "")
	if ws.ExitStatus() != 0 || o != "mine\n" {
		t.Fatalf("exec in the pooled sandbox: %v %q", ws, o)
	}
	if sb, err := b.Get(ctx, "pooled"); err != nil || sb.Owner != "id-pooled" || sb.Status != "running" {
		t.Fatalf("get: %+v %v", sb, err)
	}
	// p2's job is taken: its command runs in a fresh job.
	out.Reset()
	if res, err := p2.Run(ctx, []string{"sh", "-c", "cat /tmp/f 2>/dev/null || echo fresh"}, sandbox.Stdio{Stdout: &out, Stderr: io.Discard}, nil); err != nil || res.ExitCode != 0 || out.String() != "fresh\n" {
		t.Fatalf("run of a prepared sandbox whose job was taken: %+v %v %q", res, err, out.String())
	}
	i.Stop()
	if _, err := b.Get(ctx, "pooled"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the pooled sandbox is still there after Stop: %v", err)
	}
	if j, _, err := b.client.Jobs().Info(i.job, nil); err == nil && (j.Stop == nil || !*j.Stop) {
		t.Errorf("the pooled sandbox's job runs on after Stop")
	}
	// Close purges a prepared sandbox that never ran.
	p3, err := s.Prepare(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	p3.Close()
	if j, _, err := b.client.Jobs().Info(p3.(*prepared).job, nil); err == nil && (j.Stop == nil || !*j.Stop) {
		t.Errorf("Close left the prepared job running")
	}
}

// checkEnvOffCmdline: while a command with a secret in its environment
// runs (through the exec API and the node's agentkernel), no process of
// this machine, the node's included, has the secret on its command line,
// and the node's exec was given it on stdin; with a TTY, the block is
// not echoed and the command reads what follows it.
func checkEnvOffCmdline(t *testing.T, i *instance) {
	t.Helper()
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	secret := "tok-" + hex.EncodeToString(rnd[:])
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	p, err := i.Exec(&agent.ExecRequest{Args: []string{"sh", "-c", `echo "$T"; exec sleep 601`}, Env: []string{"T=" + secret}}, [3]int{int(inR.Fd()), int(outW.Fd()), int(outW.Fd())})
	inR.Close()
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer inW.Close()
	defer outR.Close()
	_ = outR.SetReadDeadline(time.Now().Add(time.Minute))
	line := make([]byte, len(secret)+1)
	if _, err := io.ReadFull(outR, line); err != nil || string(line) != secret+"\n" {
		t.Fatalf("the command did not see its environment: %q %v", line, err)
	}
	var sawSleep, sawNode bool
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		cl := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cl, secret) {
			t.Errorf("%s holds the secret: %q", f, cl)
		}
		if strings.HasPrefix(cl, "sleep 601") {
			sawSleep = true
		}
		if strings.Contains(cl, " exec -i --env-stdin ") {
			sawNode = true
		}
	}
	if !sawSleep || !sawNode {
		t.Errorf("the scan missed the command (%v) or the node's exec --env-stdin (%v)", sawSleep, sawNode)
	}
	_ = p.Signal(syscall.SIGKILL)
	p.Wait()

	// With a TTY: the node's terminal is raw before the block is sent.
	inR, inW2, _ := os.Pipe()
	outR2, outW2, _ := os.Pipe()
	p, err = i.Exec(&agent.ExecRequest{Args: []string{"sh", "-c", `echo "[$T]"; read x; echo "got $x"`}, Env: []string{"T=" + secret, "ML=a\nb"}, TTY: true}, [3]int{int(inR.Fd()), int(outW2.Fd()), int(outW2.Fd())})
	inR.Close()
	outW2.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer inW2.Close()
	inW2.Write([]byte("typed\r"))
	outc := make(chan string, 1)
	go func() { b, _ := io.ReadAll(outR2); outc <- string(b) }()
	waited := make(chan syscall.WaitStatus, 1)
	go func() { waited <- p.Wait() }()
	select {
	case ws := <-waited:
		if ws.ExitStatus() != 0 {
			t.Errorf("exec with a TTY: %v", ws)
		}
	case <-time.After(time.Minute):
		_ = p.Signal(syscall.SIGKILL)
		<-waited
		t.Errorf("exec with a TTY did not end")
	}
	inW2.Close()
	out := <-outc
	if !strings.Contains(out, "["+secret+"]") || !strings.Contains(out, "got typed") || strings.Count(out, secret) != 1 || strings.Contains(out, "AKENV") || strings.Contains(out, "agentkernel-env-ready") {
		t.Errorf("exec with a TTY: %q", out)
	}
}

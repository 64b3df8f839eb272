package gvisor

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestPrepared: a pooled (prepared) sandbox's command ends as a cold
// run's does (output, exit code, a signal, a missing command); a second
// prepared sandbox sees nothing of the first (files, processes) and
// cannot signal its processes, even while they run; nothing is left
// once the sandboxes are done (runsc processes, mounts, cgroups,
// directories).
func TestPrepared(t *testing.T) {
	needRunsc(t)
	layer := busyboxLayer(t)
	dataDir := t.TempDir()
	b := New(Options{DataDir: dataDir})
	ctx := context.Background()
	var timeout time.Duration
	run := func(pooled bool, args ...string) (sandbox.Result, string, error) {
		t.Helper()
		spec := testSpec(layer, args...)
		spec.Resources = sandbox.Resources{MemoryMB: 256, PIDs: 64, Timeout: timeout}
		var out, errb bytes.Buffer
		stdio := sandbox.Stdio{Stdin: strings.NewReader("in\n"), Stdout: &out, Stderr: &errb}
		if !pooled {
			res, err := b.Run(ctx, spec, stdio)
			return res, out.String() + "|" + errb.String(), err
		}
		p, err := b.Prepare(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Run(ctx, args, stdio, nil)
		return res, out.String() + "|" + errb.String(), err
	}
	for _, args := range [][]string{
		{"sh", "-c", "hostname; cat; echo err >&2; exit 7"},
		{"sh", "-c", "kill -TERM $$"},
		{"true"},
	} {
		cr, cout, cerr := run(false, args...)
		pr, pout, perr := run(true, args...)
		if cerr != nil || perr != nil || cr.ExitCode != pr.ExitCode || cr.Signal != pr.Signal || cout != pout {
			t.Errorf("%q: cold %+v %q %v, pooled %+v %q %v", args, cr, cout, cerr, pr, pout, perr)
		}
	}
	// A process the command leaves holding its output does not keep
	// the run: it ends with the sandbox, as in a cold run.
	start := time.Now()
	if pr, out, err := run(true, "sh", "-c", "sleep 60 & echo done"); err != nil || pr.ExitCode != 0 || out != "done\n|" || time.Since(start) > 20*time.Second {
		t.Errorf("a command that leaves a process behind: %+v %q %v after %v", pr, out, err, time.Since(start))
	}
	// The timeout: killed, 137, as a cold run.
	timeout = time.Second
	cr, _, cerr := run(false, "sleep", "10")
	pr, _, perr := run(true, "sleep", "10")
	if cerr != nil || perr != nil || !cr.TimedOut || !pr.TimedOut || cr.ExitCode != pr.ExitCode || cr.Signal != pr.Signal {
		t.Errorf("timeout: cold %+v %v, pooled %+v %v", cr, cerr, pr, perr)
	}
	timeout = 0
	if _, _, err := run(true, "nope"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("a missing command in a pooled sandbox: %v", err)
	}

	// Two warm sandboxes of one spec: the first runs a command that
	// leaves a file and a process; the second looks for them and tries
	// to kill every process it can reach.
	spec := testSpec(layer)
	p1, err := b.Prepare(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := b.Prepare(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx1, cancel1 := context.WithCancel(ctx)
	defer cancel1()
	var out1 bytes.Buffer
	r, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	br := bufio.NewReader(r)
	done1 := make(chan error, 1)
	go func() {
		_, err := p1.Run(ctx1, []string{"sh", "-c", "echo secret > /tmp/mark; echo up; exec sleep 300"}, sandbox.Stdio{Stdout: pw}, nil)
		pw.Close()
		done1 <- err
	}()
	if line, err := br.ReadString('\n'); err != nil || line != "up\n" {
		t.Fatalf("the first sandbox's command: %q %v", line, err)
	}
	go br.WriteTo(&out1)
	var out2, err2 bytes.Buffer
	_, err = p2.Run(ctx, []string{"sh", "-c", "cat /tmp/mark; for p in /proc/[0-9]*; do echo $p; cat $p/cmdline; echo; done; busybox kill -KILL -1"}, sandbox.Stdio{Stdout: &out2, Stderr: &err2}, nil)
	// kill -1 ends every process the command can signal (its shell
	// too, when it comes first): only its own sandbox's.
	if err != nil || !strings.Contains(out2.String(), "/proc/1") {
		t.Fatalf("the second sandbox: %v %s %s", err, out2.String(), err2.String())
	}
	if !strings.Contains(err2.String(), "/tmp/mark") || strings.Contains(out2.String(), "secret") || strings.Contains(out2.String(), "sleep") {
		t.Errorf("the second sandbox saw the first's file or process:\n%s", out2.String())
	}
	select {
	case err := <-done1:
		t.Fatalf("the first sandbox's command ended when the second tried to kill it: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	cancel1()
	select {
	case <-done1:
	case <-time.After(20 * time.Second):
		t.Fatal("a cancelled pooled run did not end")
	}
	// A prepared sandbox that never ran is discarded.
	p3, err := b.Prepare(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	p3.Close()
	b.Drain()
	if left := leftovers(dataDir); len(left) > 0 {
		t.Fatalf("left behind:\n%s", strings.Join(left, "\n"))
	}
}

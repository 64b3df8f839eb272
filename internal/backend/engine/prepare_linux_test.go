package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentkernel/agentkernel/internal/backend/engine"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestEnginePrepared: on each engine, a pooled (prepared) sandbox's
// command ends as a cold run's does (output, stdin, exit code, a
// signal); a second prepared sandbox sees nothing of the first (files,
// processes) and cannot signal its processes while they run; nothing
// is left once they are done (containers, volumes, directories).
func TestEnginePrepared(t *testing.T) {
	for _, f := range engines(t) {
		t.Run(f.name, func(t *testing.T) { testPrepared(t, f) })
	}
}

func testPrepared(t *testing.T, f *fixture) {
	ctx := context.Background()
	b := f.backend(config.DegradeLandlock)
	var ids []string
	var timeout time.Duration
	run := func(pooled bool, args ...string) (sandbox.Result, string, error) {
		t.Helper()
		spec := f.spec(t, "moderate", args...)
		spec.Resources.Timeout = timeout
		ids = append(ids, spec.ID)
		var out, errb bytes.Buffer
		stdio := sandbox.Stdio{Stdout: &out, Stderr: &errb}
		if strings.Contains(strings.Join(args, " "), "cat") {
			// Only to a command that reads it: podman's exec reports
			// stdin it could not deliver to an ended command in the
			// command's stderr ("write: broken pipe").
			stdio.Stdin = strings.NewReader("in\n")
		}
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
		{"sh", "-c", "sleep 5 & kill -TERM $!; wait $!"},
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
	t.Logf("a command that left a process behind ended the run after %v", time.Since(start).Round(time.Millisecond))
	// The timeout: killed, 137, as a cold run.
	timeout = time.Second
	cr, _, cerr := run(false, "sleep", "10")
	pr, _, perr := run(true, "sleep", "10")
	if cerr != nil || perr != nil || !cr.TimedOut || !pr.TimedOut || cr.ExitCode != pr.ExitCode || cr.Signal != pr.Signal {
		t.Errorf("timeout: cold %+v %v, pooled %+v %v", cr, cerr, pr, perr)
	}
	timeout = 0
	// One difference, documented: a cold run's command is the
	// container's PID 1, which the kernel shields from the signals it
	// has no handler for, its own included; a pooled command is not,
	// and dies of them as on the native and gvisor backends.
	if pr, out, err := run(true, "sh", "-c", "kill -TERM $$"); err != nil || pr.ExitCode != 143 {
		t.Errorf("a pooled command's signal to itself: %+v %q %v", pr, out, err)
	}

	spec := f.spec(t, "moderate")
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
	r, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	done1 := make(chan error, 1)
	go func() {
		_, err := p1.Run(ctx1, []string{"sh", "-c", "echo secret > /tmp/mark; echo up; exec sleep 300"}, sandbox.Stdio{Stdout: pw}, nil)
		pw.Close()
		done1 <- err
	}()
	br := bufio.NewReader(r)
	if line, err := br.ReadString('\n'); err != nil || line != "up\n" {
		t.Fatalf("the first sandbox's command: %q %v", line, err)
	}
	var out2, err2 bytes.Buffer
	_, err = p2.Run(ctx, []string{"sh", "-c", "cat /tmp/mark; for p in /proc/[0-9]*; do echo $p; cat $p/cmdline; echo; done; kill -KILL -1"},
		sandbox.Stdio{Stdout: &out2, Stderr: &err2}, nil)
	// kill -1 ends every process the command can signal (its shell
	// too): only its own container's.
	if err != nil || !strings.Contains(out2.String(), "/proc/1") || !strings.Contains(err2.String(), "/tmp/mark") {
		t.Fatalf("the second sandbox: %v %s %s", err, out2.String(), err2.String())
	}
	if strings.Contains(out2.String(), "secret") || strings.Contains(out2.String(), "sleep") {
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
	case <-time.After(30 * time.Second):
		t.Fatal("a cancelled pooled run did not end")
	}
	// The Landlock warning goes with the prepared container, to the
	// run that takes it, not to the backend's log at each preparation.
	f.mu.Lock()
	warned := len(*f.warns)
	f.mu.Unlock()
	p3, err := b.Prepare(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	warnedNow := len(*f.warns)
	f.mu.Unlock()
	if w := p3.Warnings(); len(w) != 1 || !strings.Contains(w[0], "Landlock") || warnedNow != warned {
		t.Errorf("a preparation's warnings: %q, %d new in the log", w, warnedNow-warned)
	}
	p3.Close()
	b.Drain()
	f.assertGone(t, spec.ID)
	for _, id := range ids {
		f.assertGone(t, id)
	}
	f.assertNoManaged(t)
}

// assertNoManaged fails when the engine still has a container or volume
// of agentkernel's.
func (f *fixture) assertNoManaged(t *testing.T) {
	t.Helper()
	cli, err := client.New(client.WithHost(f.host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	l, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", engine.LabelManaged+"=true")})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range l.Items {
		t.Errorf("%s: container left: %s %v", f.name, c.ID[:12], c.Labels)
	}
	v, err := cli.VolumeList(context.Background(), client.VolumeListOptions{Filters: client.Filters{}.Add("label", engine.LabelManaged+"=true")})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range v.Items {
		t.Errorf("%s: volume left: %s", f.name, x.Name)
	}
}

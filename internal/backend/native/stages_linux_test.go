package native

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestStageFailureRoundTrip: a report decodes to what was encoded, for
// each kind, and the parent maps it to the errors behind the exit codes
// (127 not found, 126 cannot invoke, 125 anything else) with the message
// the user sees unchanged.
func TestStageFailureRoundTrip(t *testing.T) {
	for _, c := range []struct {
		f    stageFailure
		is   error
		text string
	}{
		{stageFailure{Exec: true, Errno: unix.ENOENT, Msg: "nope: executable file not found in $PATH"}, sandbox.ErrNotFound, ""},
		{stageFailure{Exec: true, Errno: unix.EACCES, Msg: "exec /etc/passwd: permission denied"}, sandbox.ErrCannotInvoke, ""},
		{stageFailure{Exec: true, Errno: unix.E2BIG, Msg: "exec x: argument list too long"}, sandbox.ErrCannotInvoke, ""}, // 126, as a shell and a persistent sandbox's exec say
		{stageFailure{Errno: unix.EPERM, Stage: stagePivot, Msg: "pivoting root: pivot_root: operation not permitted"}, nil, ""},
		{stageFailure{Stage: stageVolumes, Msg: "mounting volumes: bind /a:/b: no such file or directory"}, nil, ""},
		{stageFailure{Msg: "message with spaces and\nnewlines and a \x00 byte"}, nil, ""},
		{stageFailure{Errno: unix.ENOENT, Msg: "setup errors are not 127 even with ENOENT"}, nil, ""},
	} {
		b := c.f.encode()
		got, err := decodeStageFailure(b)
		if err != nil {
			t.Fatalf("decode(encode(%+v)): %v", c.f, err)
		}
		if *got != c.f {
			t.Errorf("round trip: got %+v, want %+v", *got, c.f)
		}
		// A report followed by anything else (a second writer on the same
		// pipe) still decodes to the first.
		if got, err := decodeStageFailure(append(b, (&stageFailure{Msg: "second"}).encode()...)); err != nil || got.Msg != c.f.Msg {
			t.Errorf("first of two reports: %+v, %v", got, err)
		}
		e := parseInitError(b)
		if e.Error() != c.f.Msg && !strings.HasPrefix(e.Error(), c.f.Msg+": ") {
			t.Errorf("parseInitError(%+v) = %q", c.f, e)
		}
		for _, target := range []error{sandbox.ErrNotFound, sandbox.ErrCannotInvoke} {
			if errors.Is(e, target) != (c.is == target) {
				t.Errorf("parseInitError(%+v) = %v: errors.Is(%v) = %v", c.f, e, target, !(c.is == target))
			}
		}
	}
}

// TestStageFailureHostile: what is not a whole report (truncated, a
// length past its end or over the bound, an unknown stage or flag, the
// old text format) is refused, not read past or trusted.
func TestStageFailureHostile(t *testing.T) {
	good := (&stageFailure{Exec: true, Errno: unix.ENOENT, Stage: stageCommand, Msg: "x: not found"}).encode()
	bad := [][]byte{
		nil,
		[]byte("exec 2 x: not found"),
		good[:stageFailureHdr-1],
		good[:len(good)-1],
		func() []byte { b := append([]byte(nil), good...); b[1] = 2; return b }(),
		func() []byte { b := append([]byte(nil), good...); b[2] = byte(stageLast + 1); return b }(),
		func() []byte {
			b := append([]byte(nil), good...)
			b[7], b[8], b[9], b[10] = 0xff, 0xff, 0xff, 0xff
			return b
		}(),
	}
	for _, b := range bad {
		if f, err := decodeStageFailure(b); err == nil {
			t.Errorf("decode(%q) = %+v, want an error", b, f)
		}
		if e := parseInitError(b); e == nil || errors.Is(e, sandbox.ErrNotFound) || errors.Is(e, sandbox.ErrCannotInvoke) {
			t.Errorf("parseInitError(%q) = %v", b, e)
		}
	}
	long := (&stageFailure{Msg: strings.Repeat("a", maxFailureMsg+100)}).encode()
	if f, err := decodeStageFailure(long); err != nil || len(f.Msg) != maxFailureMsg {
		t.Errorf("an over-long message is cut to %d bytes: %v", maxFailureMsg, err)
	}
}

// TestStageTable: every stage has a name and a function wherever it is
// placed, names are unique, a stage needs only a later one (which then
// runs first), and every executor ends by starting the command.
func TestStageTable(t *testing.T) {
	names := map[string]bool{}
	for id := stageID(1); id <= stageLast; id++ {
		st := stages[id]
		if st.name == "" || names[st.name] {
			t.Errorf("stage %d: name %q empty or used twice", id, st.name)
		}
		names[st.name] = true
		for ex := executor(0); ex < numExecutors; ex++ {
			w := st.where[ex]
			switch w.at {
			case inBuilder:
				if st.run == nil {
					t.Errorf("%s: placed in the builder of executor %d without a function", st.name, ex)
				}
			case inPID1:
				if st.pid1 == nil && st.moveIn == nil {
					t.Errorf("%s: placed in PID 1 of executor %d with neither script nor move", st.name, ex)
				}
				if ex == byReexec {
					t.Errorf("%s: the re-executed init has no stub PID 1", st.name)
				}
			}
			if w.needs != 0 && (w.needs <= id || w.needs > stageLast) {
				t.Errorf("%s needs %d, which is not a later stage", st.name, w.needs)
			}
		}
	}
	for ex := executor(0); ex < numExecutors; ex++ {
		if stages[stageCommand].where[ex].at != inBuilder {
			t.Errorf("executor %d does not start the command", ex)
		}
	}
}

// TestStageOrder: the runner follows the table's order, runs each
// stage once, pulls a stage's needs forward, and names the stage that
// failed.
func TestStageOrder(t *testing.T) {
	var order []int // a stage's id when it ran, minus its id when it moved in what PID 1 staged
	saved := stages
	defer func() { stages = saved }()
	for id := stageID(1); id <= stageLast; id++ {
		id := id
		stages[id].run = func(*initState) error { order = append(order, int(id)); return nil }
		stages[id].moveIn = func(*initState) error { order = append(order, -int(id)); return nil }
	}
	s := &initState{executor: byThread}
	if _, err := s.runStages(1, stageExecStart); err != nil {
		t.Fatal(err)
	}
	if _, err := s.runStages(stageExecStart+1, stageLast); err != nil {
		t.Fatal(err)
	}
	// The thread forks PID 1 into the cgroup: the cgroup comes first.
	want := []int{int(stageNamespaces), int(stageScratch), int(stageCgroup), int(stagePID1), -int(stageProcMount), int(stageExecStart), int(stageNetwork),
		int(stageRootfs), -int(stageProc), -int(stageDev), -int(stageSys), -int(stageTmp), int(stageVolumes), int(stageResolv), int(stageProcess), int(stagePivot), int(stageCommand)}
	if !slices.Equal(order, want) {
		t.Errorf("thread order %v, want %v", order, want)
	}
	order = nil
	s = &initState{executor: byPrestarted}
	if _, err := s.runStages(1, stageLast); err != nil {
		t.Fatal(err)
	}
	// A prestarted PID 1 gets its script before the cgroup is taken.
	if want := []int{int(stageScratch), int(stagePID1), -int(stageProcMount), int(stageCgroup), int(stageExecStart)}; !slices.Equal(order[:len(want)], want) {
		t.Errorf("prestarted order %v, want it to start with %v", order, want)
	}
	stages[stageRootfs].run = func(*initState) error { return unix.EIO }
	s = &initState{executor: byReexec}
	failed, err := s.runStages(1, stageLast)
	if failed != stageRootfs || !errors.Is(err, unix.EIO) {
		t.Errorf("failed stage %d (%v), want %d", failed, err, stageRootfs)
	}
	if f := stageReport(failed, err); f.Msg != "mounting root filesystem: input/output error" || f.Stage != stageRootfs || f.Exec {
		t.Errorf("report %+v", f)
	}
}

// TestFailureReportsEveryExecutor: a command that is not there (127), one
// that cannot be executed (126), a working directory that cannot be
// entered (a set-up failure in the exec stage: 125) and a failed stage
// (125, named) come back as the same errors from every executor: the
// thread, the re-executed init, the Go exec stage and a prepared
// sandbox.
func TestFailureReportsEveryExecutor(t *testing.T) {
	requireRoot(t)
	type runner func(spec *sandbox.Spec) error
	direct := func(b *Backend) runner {
		return func(spec *sandbox.Spec) error {
			_, err := b.Run(context.Background(), spec, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard})
			return err
		}
	}
	for _, ex := range []struct {
		name   string
		reexec bool
		run    func(b *Backend) runner
		goExec bool
	}{
		{name: "thread", run: direct},
		{name: "reexec", reexec: true, run: direct},
		{name: "go-exec-stage", goExec: true, run: direct},
		{name: "prepared", run: func(b *Backend) runner {
			return func(spec *sandbox.Spec) error {
				p, err := b.Prepare(context.Background(), spec)
				if err != nil {
					return err
				}
				_, err = p.Run(context.Background(), spec.Args, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard}, nil)
				return err
			}
		}},
	} {
		t.Run(ex.name, func(t *testing.T) {
			if ex.reexec {
				t.Setenv("AGENTKERNEL_REEXEC_INIT", "1")
			}
			b := New(Options{DataDir: t.TempDir()})
			b.goExecStage = ex.goExec
			run := ex.run(b)
			if err := run(newSpec("no-such-command")); !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "no-such-command") {
				t.Errorf("not found: %v", err)
			}
			if err := run(newSpec("/etc")); !errors.Is(err, sandbox.ErrCannotInvoke) {
				t.Errorf("a directory: %v", err)
			}
			// chdir fails in the exec stage (ENOTDIR): a set-up failure.
			spec := newSpec("true")
			spec.Workdir = "/etc/passwd"
			err := run(spec)
			if err == nil || errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrCannotInvoke) ||
				err.Error() != "workdir /etc/passwd: not a directory" {
				t.Errorf("workdir a file: %v", err)
			}
			// A stage fails (a mount point under a file): its name from
			// the list leads the message.
			spec = newSpec("true")
			spec.Mounts = []sandbox.Mount{{Kind: sandbox.MountTmpfs, Dest: "/etc/passwd/x"}}
			if err := run(spec); err == nil || errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrCannotInvoke) ||
				!strings.HasPrefix(err.Error(), stages[stageVolumes].name+": ") {
				t.Errorf("volume under a file: %v", err)
			}
		})
	}
}

package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/backend/engine"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/supervisor"
)

// TestEnginePersistent: a persistent sandbox on each engine, booted and
// served by the supervisor's own Serve, driven through its socket as
// the CLI drives it: exec (exit codes, stdin, a terminal), files, stats,
// stop; its copy-on-write workspace kept from one boot to the next,
// the host's directory never written; nothing left after.
func TestEnginePersistent(t *testing.T) {
	for _, f := range engines(t) {
		t.Run(f.name, func(t *testing.T) { testPersistent(t, f) })
	}
}

// boot serves the sandbox of spec in dir until it is stopped.
func boot(t *testing.T, f *fixture, specID string, dir string, name string) (*agent.Client, <-chan error) {
	t.Helper()
	spec := f.spec(t, "moderate")
	spec.ID, spec.Name, spec.Args = specID, name, nil
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		served <- supervisor.Serve(context.Background(), f.backend(config.DegradeLandlock), spec, dir, w)
	}()
	var b [256]byte
	n, _ := r.Read(b[:])
	r.Close()
	if string(b[:n]) != "ok" {
		t.Fatalf("boot: %s (%v)", b[:n], <-served)
	}
	c, err := agent.Dial(filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	return c, served
}

func execOut(t *testing.T, c *agent.Client, stdin string, args ...string) (int, string) {
	t.Helper()
	in, out := tempFile(t, stdin), tempFile(t, "")
	st, err := c.Exec(context.Background(), agent.ExecRequest{Args: args}, in, out, out, nil)
	if err != nil {
		t.Fatalf("exec %v: %v", args, err)
	}
	b, _ := os.ReadFile(out.Name())
	return st.ExitStatus(), string(b)
}

func tempFile(t *testing.T, content string) *os.File {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "io")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	return f
}

func testPersistent(t *testing.T, f *fixture) {
	ctx := context.Background()
	project := filepath.Join(f.tmp, "project")
	_ = os.MkdirAll(project, 0o755)
	if err := os.WriteFile(filepath.Join(project, "src"), []byte("original\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := treeOf(t, project)
	dir := filepath.Join(f.tmp, "sandboxes", "box")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	id := "p" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	c, served := boot(t, f, id, dir, "box")

	// The engine reads the command's stdout and stderr from two pipes:
	// their order in one file is not the order they were written in.
	if code, out := execOut(t, c, "", "sh", "-c", "echo hi; echo err >&2; exit 3"); code != 3 || (out != "hi\nerr\n" && out != "err\nhi\n") {
		t.Errorf("exec: %d %q", code, out)
	}
	if code, out := execOut(t, c, "from stdin\n", "tr", "a-z", "A-Z"); code != 0 || out != "FROM STDIN\n" {
		t.Errorf("stdin: %d %q", code, out)
	}
	if code, out := execOut(t, c, "", "cat", "/proc/1/cmdline"); code != 0 || !strings.HasPrefix(out, "/.agentkernel-idle") {
		t.Errorf("PID 1: %d %q", code, out)
	}
	// A command that is not there is not found (127), as a run's and as
	// on native and gvisor, never the engine's 126 with its runtime's
	// words on the command's output; by path and by name in the PATH.
	for _, cmd := range []string{"/no/such/command", "no-such-command-here"} {
		in, out := tempFile(t, ""), tempFile(t, "")
		if _, err := c.Exec(ctx, agent.ExecRequest{Args: []string{cmd}}, in, out, out, nil); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("missing command %s: %v, want sandbox.ErrNotFound", cmd, err)
		}
		if b, _ := os.ReadFile(out.Name()); len(b) != 0 {
			t.Errorf("missing command %s wrote %q", cmd, b)
		}
	}
	// The workspace is copy-on-write; the root is writable.
	if code, out := execOut(t, c, "", "sh", "-c", "echo changed > /workspace/src && echo kept > /workspace/new && echo root > /root-file && cat /workspace/src"); code != 0 || out != "changed\n" {
		t.Errorf("writes: %d %q", code, out)
	}
	// Files: written, read and listed through the container's root,
	// confined to it.
	if _, err := c.WriteFile(ctx, "/tmp/put", strings.NewReader("put by cp\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := execOut(t, c, "", "cat", "/tmp/put"); code != 0 || out != "put by cp\n" {
		t.Errorf("written file: %d %q", code, out)
	}
	var got bytes.Buffer
	if _, err := c.ReadFile(ctx, "/workspace/new", &got); err != nil || got.String() != "kept\n" {
		t.Errorf("read: %q %v", got.String(), err)
	}
	t.Run("attack: a symlink out of the container's root", func(t *testing.T) {
		if code, _ := execOut(t, c, "", "ln", "-s", "/proc/1/root/../../../../etc", "/tmp/escape"); code != 0 {
			t.Fatal("ln failed")
		}
		_, _ = execOut(t, c, "", "ln", "-s", "../../../../../../", "/tmp/up")
		hostMarker := filepath.Join(f.tmp, "host-marker")
		_ = os.WriteFile(hostMarker, []byte("host secret\n"), 0o600)
		for _, p := range []string{"/tmp/up" + hostMarker, "/../../../../" + hostMarker, "/tmp/escape/hostname"} {
			var b bytes.Buffer
			_, err := c.ReadFile(ctx, p, &b)
			if strings.Contains(b.String(), "host secret") {
				t.Errorf("%s read the host's file", p)
			}
			_ = err
		}
		if _, err := c.WriteFile(ctx, "/tmp/up"+filepath.Join(f.tmp, "written-by-sandbox"), strings.NewReader("x"), 0o644); err == nil {
			if _, serr := os.Stat(filepath.Join(f.tmp, "written-by-sandbox")); serr == nil {
				t.Error("a write through a symlink reached the host")
			}
		}
	})
	st, err := c.Stats(ctx)
	if err != nil || st.Pids < 1 || st.MemoryBytes <= 0 || st.UptimeSeconds <= 0 {
		t.Errorf("stats %+v, %v", st, err)
	}
	t.Run("terminal", func(t *testing.T) {
		ptmx, tty, err := pty.Open()
		if err != nil {
			t.Fatal(err)
		}
		defer ptmx.Close()
		defer tty.Close()
		_ = pty.Setsize(ptmx, &pty.Winsize{Rows: 33, Cols: 99})
		res := make(chan syscall.WaitStatus, 1)
		go func() {
			s, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"sh", "-c", "tty >/dev/null && echo is-a-tty; exit 5"}, TTY: true}, tty, tty, tty, nil)
			if err != nil {
				t.Error(err)
			}
			res <- s
		}()
		var out bytes.Buffer
		buf := make([]byte, 1024)
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(out.String(), "is-a-tty") && time.Now().Before(deadline) {
			_ = ptmx.SetReadDeadline(time.Now().Add(time.Second))
			n, _ := ptmx.Read(buf)
			out.Write(buf[:n])
		}
		s := <-res
		// The size is given to the engine (ConsoleSize, ExecResize);
		// busybox's stty cannot read it back in these containers
		// (TIOCGWINSZ answers ENOTTY there), so it is not checked here.
		if !strings.Contains(out.String(), "is-a-tty") || s.ExitStatus() != 5 {
			t.Errorf("terminal: %q, status %d", out.String(), s.ExitStatus())
		}
	})
	// Stop: the sandbox's processes get SIGTERM first.
	_, _ = execOut(t, c, "", "sh", "-c", "sleep 1000 >/dev/null 2>&1 &")
	start := time.Now()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("stop took %v", d)
	}
	assertNoContainer(t, f, id)
	if after := treeOf(t, project); after != before {
		t.Errorf("the host's project changed:\n%s\nwas\n%s", after, before)
	}
	// The next boot has the workspace's changes, not the root's.
	c, served = boot(t, f, id, dir, "box")
	if code, out := execOut(t, c, "", "sh", "-c", "cat /workspace/src /workspace/new; cat /root-file 2>/dev/null || echo no-root-file"); code != 0 || out != "changed\nkept\nno-root-file\n" {
		t.Errorf("second boot: %d %q", code, out)
	}
	_ = c.Stop(ctx)
	c.Close()
	<-served
	assertNoContainer(t, f, id)
}

// assertNoContainer fails if a container or volume of id is left.
func assertNoContainer(t *testing.T, f *fixture, id string) {
	t.Helper()
	cli, err := client.New(client.WithHost(f.host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	l, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", engine.LabelID+"="+id)})
	if err != nil || len(l.Items) != 0 {
		t.Errorf("containers left: %+v %v", l.Items, err)
	}
	v, err := cli.VolumeList(context.Background(), client.VolumeListOptions{Filters: client.Filters{}.Add("label", engine.LabelID+"="+id)})
	if err != nil || len(v.Items) != 0 {
		t.Errorf("volumes left: %+v %v", v.Items, err)
	}
}

// TestEngineGC: a container whose owner process is gone (a run killed
// mid-way) is removed with its volume; one whose owner runs is kept.
func TestEngineGC(t *testing.T) {
	for _, f := range engines(t) {
		t.Run(f.name, func(t *testing.T) {
			ctx := context.Background()
			cli, err := client.New(client.WithHost(f.host), client.WithAPIVersionNegotiation())
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			// The test itself is a live owner; a dead one is a process
			// that has exited.
			dead := exec.Command("true")
			if err := dead.Run(); err != nil {
				t.Fatal(err)
			}
			ref := "agentkernel.local/image:" + strings.TrimPrefix(f.rootfs.Digest, "sha256:")
			// The image is in the engine after one run.
			if _, _, err := f.run(t, ctx, f.spec(t, "permissive", "true"), "", nil); err != nil {
				t.Fatal(err)
			}
			mk := func(id, owner string) string {
				if _, err := cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: "agentkernel-" + id + "-cow0", Labels: map[string]string{engine.LabelManaged: "true", engine.LabelID: id}}); err != nil {
					t.Fatal(err)
				}
				c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: &container.Config{Image: ref, Cmd: []string{"true"},
					Labels: map[string]string{engine.LabelManaged: "true", engine.LabelID: id, engine.LabelOwner: owner}}})
				if err != nil {
					t.Fatal(err)
				}
				return c.ID
			}
			orphan := mk("gcdead", fmt.Sprintf("%d 12345", dead.Process.Pid))
			st, _ := os.ReadFile("/proc/self/stat")
			fields := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
			live := mk("gclive", fmt.Sprintf("%d %s", os.Getpid(), fields[19]))
			removed, err := engine.GC(ctx, filepath.Join(f.tmp, "data"), f.backend())
			if err != nil {
				t.Fatal(err)
			}
			if len(removed) != 2 || !strings.Contains(removed[0], orphan[:12]) || !strings.Contains(removed[1], "agentkernel-gcdead-cow0") {
				t.Errorf("removed %v", removed)
			}
			if _, err := cli.ContainerInspect(ctx, live, client.ContainerInspectOptions{}); err != nil {
				t.Errorf("the live owner's container went: %v", err)
			}
			if _, err := cli.ContainerInspect(ctx, orphan, client.ContainerInspectOptions{}); err == nil {
				t.Error("the orphan is still there")
			}
			_, _ = cli.ContainerRemove(ctx, live, client.ContainerRemoveOptions{Force: true})
			_, _ = cli.VolumeRemove(ctx, "agentkernel-gclive-cow0", client.VolumeRemoveOptions{Force: true})
		})
	}
}

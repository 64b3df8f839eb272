//go:build linux

package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"
)

// TestEngineGCKilledRun: a rootful docker or podman run of the
// permissive profile (the project bound writable, through an idmapped
// clone that agentkernel attaches in the engine daemon's mount
// namespace under DataDir/engine/owned.*) killed with SIGKILL mid-run
// leaves its container, that directory and its mount in the daemon's
// namespace; 'agentkernel gc' removes all three and leaves alone a run
// in progress beside it, which then goes on writing to the project and
// ends as usual, leaving nothing either. The project's files are never
// touched.
func TestEngineGCKilledRun(t *testing.T) {
	for _, e := range engines() {
		t.Run(e.name, func(t *testing.T) {
			checkEngineGCKilledRun(t, e, startEngine(t, e))
		})
	}
}

func checkEngineGCKilledRun(t *testing.T, e engine, host string) {
	daemon := socketPeer(t, strings.TrimPrefix(host, "unix://"))
	a, ref := withEngine(t, e, host)
	if err := os.WriteFile(filepath.Join(a.dir, "project.txt"), []byte("project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	engineDir := filepath.Join(a.dataDir, "engine")
	owned := func() []string {
		l, _ := filepath.Glob(filepath.Join(engineDir, "owned.*"))
		return l
	}
	// mounts are the mount points under dir in the daemon's namespace.
	mounts := func(dir string) []string {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(daemon) + "/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
				out = append(out, f[4])
			}
		}
		return out
	}
	cli, err := client.New(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	containers := func() []string {
		l, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", "agentkernel.managed=true")})
		if err != nil {
			t.Fatalf("listing the engine's containers: %v", err)
		}
		var ids []string
		for _, c := range l.Items {
			ids = append(ids, c.ID)
		}
		return ids
	}
	waitFile := func(name string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(a.dir, name)); err == nil {
				return
			}
		}
		t.Fatalf("the run did not write %s", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := func(script string) (*exec.Cmd, *strings.Builder) {
		t.Helper()
		c := a.cmd(ctx, "run", "-B", e.name, "-p", "permissive", "--image", ref, "--", "sh", "-c", script)
		var stderr strings.Builder
		c.Stderr = &stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if c.ProcessState == nil {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
		})
		return c, &stderr
	}

	killed, _ := start("touch /workspace/started-a; sleep 120")
	waitFile("started-a")
	if len(owned()) != 1 {
		t.Fatalf("the run's owned directories: %v", owned())
	}
	killedDir := owned()[0]
	live, liveErr := start("touch /workspace/started-b; while [ ! -e /workspace/go-b ]; do sleep 0.1; done; echo done > /workspace/done-b")
	waitFile("started-b")
	var liveDir string
	for _, d := range owned() {
		if d != killedDir {
			liveDir = d
		}
	}
	if liveDir == "" || len(mounts(killedDir)) == 0 || len(mounts(liveDir)) == 0 {
		t.Fatalf("the runs' clones in the daemon's namespace: %s %v, %s %v", killedDir, mounts(killedDir), liveDir, mounts(liveDir))
	}

	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = killed.Wait()
	if n := len(containers()); n != 2 {
		t.Fatalf("after the kill: %d containers, want the killed run's and the live one's", n)
	}
	if _, err := os.Stat(killedDir); err != nil || len(mounts(killedDir)) == 0 {
		t.Fatalf("the killed run left no owned directory or mount to collect (%v, %v)", err, mounts(killedDir))
	}

	r := a.run("gc")
	if r.code != 0 || !strings.Contains(r.stdout, e.name+" container") || !strings.Contains(r.stdout, "removed "+killedDir+"\n") {
		t.Errorf("gc: %v", r)
	}
	if m := mounts(killedDir); len(m) != 0 {
		t.Errorf("the killed run's mounts are left in the daemon's namespace: %v", m)
	}
	if _, err := os.Lstat(killedDir); !os.IsNotExist(err) {
		t.Errorf("the killed run's directory is left: %v", err)
	}
	if n := len(containers()); n != 1 {
		t.Errorf("after gc: %d containers, want the live run's only", n)
	}
	if _, err := os.Stat(filepath.Join(liveDir, "lock")); err != nil || len(mounts(liveDir)) == 0 {
		t.Errorf("gc touched the live run: %v, mounts %v", err, mounts(liveDir))
	}
	if b, err := os.ReadFile(filepath.Join(a.dir, "project.txt")); err != nil || string(b) != "project\n" {
		t.Errorf("the project's file after gc: %q %v", b, err)
	}

	// The live run goes on, writing to the project, and ends as usual.
	if err := os.WriteFile(filepath.Join(a.dir, "go-b"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := live.Wait(); err != nil {
		t.Errorf("the live run: %v\n%s", err, liveErr)
	}
	if b, err := os.ReadFile(filepath.Join(a.dir, "done-b")); err != nil || string(b) != "done\n" {
		t.Errorf("the live run's write after gc: %q %v", b, err)
	} else if fileUID(filepath.Join(a.dir, "done-b")) != os.Getuid() {
		t.Errorf("the live run's file is host uid %d's", fileUID(filepath.Join(a.dir, "done-b")))
	}
	if l, m, c := owned(), mounts(engineDir), containers(); len(l) != 0 || len(m) != 0 || len(c) != 0 {
		t.Errorf("after both runs: owned directories %v, mounts %v, containers %v", l, m, c)
	}
	if r := a.run("gc"); r.code != 0 || strings.Contains(r.stdout, "removed") {
		t.Errorf("a second gc: %v", r)
	}
}

// socketPeer is the process at the other end of unix socket path: an
// engine's daemon.
func socketPeer(t *testing.T, path string) int {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cerr != nil {
		t.Fatalf("the engine's process: %v %v", err, cerr)
	}
	return int(cred.Pid)
}

package gvisor

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// TestCheckpointRestoreKeeps pins what runsc's checkpoint and restore
// keep of a sandbox laid out as a persistent sandbox is (the idle init
// as its first process, commands beside it with `runsc exec`, no gVisor
// overlay, shared file access), the premise of doc.go's "Detached
// commands and memory snapshots":
//
//   - a command running under `runsc exec` does not come back;
//   - nor does one that such a command daemonized (setsid and a double
//     fork, stdio away from runsc's, re-parented to the idle init):
//     gVisor marks every task `runsc exec` creates, and every task they
//     clone, as an exec's, and its restore kills all of them;
//   - a process that is a container's own (here a second container of
//     the same sandbox, started with runsc create and start over the
//     same root) comes back with its memory, and so do its children,
//     its output going to its restore's stdout;
//   - as a memory snapshot would need it: a sandbox held still by runsc
//     pause is checkpointed with --leave-running and stays paused, and
//     the image restores as containers of other ids whose names (the
//     CRI name annotation) are the same.
//
// Each process counts in a shell variable and writes the count to a file
// in the root every 0.2 s; the host reads the root directly. Checkpoint
// and restore times and the image's size are logged.
func TestCheckpointRestoreKeeps(t *testing.T) {
	needRunsc(t)
	if idleInit() == nil {
		t.Skip("the idle init exists on amd64 only")
	}
	runsc, _ := findRunsc()
	base := t.TempDir()
	rootfs := filepath.Join(base, "rootfs")
	if err := os.CopyFS(rootfs, os.DirFS(busyboxLayer(t))); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"c", "proc", "dev", "sys"} {
		if err := os.Mkdir(filepath.Join(rootfs, d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []string{"setsid", "mv", "ps"} {
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", c)); err != nil {
			t.Fatal(err)
		}
	}
	idle := filepath.Join(base, "idle")
	if err := os.WriteFile(idle, idleInit(), 0o555); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, strings.TrimPrefix(idlePath, "/")), nil, 0o555); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(base, "state")
	// The restore makes containers of other ids (a restored sandbox's
	// are its own); their names, which gVisor keys the restore on, are
	// the same.
	const root, sub, root2, sub2 = "ck-root", "ck-sub", "ck-root2", "ck-sub2"
	// counter counts from start in a shell variable, written to /c/name.
	counter := func(name string, start int) string {
		return "i=" + strconv.Itoa(start) + "; while :; do i=$((i+1)); echo $i >/c/" + name + ".new; mv /c/" + name + ".new /c/" + name + "; sleep 0.2; done"
	}
	bundle := func(dir string, args []string, mounts []specs.Mount, ann map[string]string) {
		t.Helper()
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		s := &specs.Spec{
			Version: specs.Version,
			Process: &specs.Process{Args: args, Cwd: "/", Env: []string{"PATH=/bin"}, NoNewPrivileges: true},
			Root:    &specs.Root{Path: rootfs},
			Mounts: append([]specs.Mount{
				{Destination: "/proc", Type: "proc", Source: "proc"},
				{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
				{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"ro"}},
			}, mounts...),
			Annotations: ann,
			Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace}, {Type: specs.NetworkNamespace},
			}},
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The second container also writes its count to its stdout.
	subArgs := []string{"/bin/sh", "-c", "(" + counter("subchild", 5000) + ") & " + strings.Replace(counter("sub", 4000), "echo $i >", "echo $i; echo $i >", 1)}
	bundles := map[string]string{}
	for _, b := range []struct{ id, sandbox string }{{root, root}, {sub, root}, {root2, root2}, {sub2, root2}} {
		dir := filepath.Join(base, "b-"+b.id)
		bundles[b.id] = dir
		ann := map[string]string{"io.kubernetes.cri.sandbox-id": b.sandbox}
		if b.id == b.sandbox {
			ann["io.kubernetes.cri.container-type"], ann["io.kubernetes.cri.container-name"] = "sandbox", "sandbox"
			bundle(dir, []string{idlePath}, []specs.Mount{{Destination: idlePath, Type: "bind", Source: idle, Options: []string{"rbind", "ro"}}}, ann)
		} else {
			ann["io.kubernetes.cri.container-type"], ann["io.kubernetes.cri.container-name"] = "container", "detached"
			bundle(dir, subArgs, nil, ann)
		}
	}
	rs := func(args ...string) *exec.Cmd {
		return exec.Command(runsc, append([]string{"--root", state, "--platform=systrap", "--network=none", "--overlay2=none", "--file-access=shared"}, args...)...)
	}
	// mustTo runs c, its output to the file out (a new one if ""):
	// what runsc run, create and restore leave running holds their
	// stdio open, and gives it to the container's first process.
	mustTo := func(c *exec.Cmd, out string) {
		t.Helper()
		f, err := os.CreateTemp(base, "out")
		if out != "" {
			f, err = os.Create(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		c.Stdout, c.Stderr = f, f
		if err := c.Run(); err != nil {
			b, _ := os.ReadFile(f.Name())
			t.Fatalf("%s: %v: %s", strings.Join(c.Args, " "), err, b)
		}
	}
	must := func(c *exec.Cmd) { t.Helper(); mustTo(c, "") }
	t.Cleanup(func() {
		for _, id := range []string{sub, root, sub2, root2} {
			_ = rs("delete", "--force", id).Run()
		}
		// runsc binds its network namespace (--network=none) into its
		// state directory, here in the host's mount namespace.
		_ = unix.Unmount(filepath.Join(state, "null-netns"), unix.MNT_DETACH)
	})
	must(rs("run", "--bundle", bundles[root], "--detach", root))
	mustTo(rs("create", "--bundle", bundles[sub], sub), filepath.Join(base, "sub-out-1"))
	must(rs("start", sub))
	// A foreground command, whose runsc exec stays on the host.
	fg := rs("exec", root, "/bin/sh", "-c", counter("fg", 1000))
	if err := fg.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = fg.Process.Kill(); _ = fg.Wait() }()
	// A daemonized one: its runsc exec ends at once.
	must(rs("exec", root, "/bin/sh", "-c", "(setsid /bin/sh -c '"+counter("daemon", 2000)+"' </dev/null >/dev/null 2>&1 &)"))

	read := func(name string) int {
		b, _ := os.ReadFile(filepath.Join(rootfs, "c", name))
		n, _ := strconv.Atoi(string(bytes.TrimSpace(b)))
		return n
	}
	names := []string{"fg", "daemon", "sub", "subchild"}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for i, n := range names {
			if read(n) < (i+1)*1000+5 {
				ok = false
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the counters did not start: %v %v %v %v", read("fg"), read("daemon"), read("sub"), read("subchild"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The daemon is the idle init's child, in a session of its own.
	ps, err := rs("exec", root, "/bin/ps", "-o", "pid,ppid,sid,args").Output()
	if err != nil {
		t.Fatalf("ps: %v", err)
	}
	daemonized := false
	for _, l := range strings.Split(string(ps), "\n") {
		if f := strings.Fields(l); len(f) > 3 && strings.Contains(l, "i=2000") && f[1] == "1" && f[2] == f[0] {
			daemonized = true
		}
	}
	if !daemonized {
		t.Fatalf("the daemon is not the init's child in a session of its own:\n%s", ps)
	}

	img := filepath.Join(base, "image")
	if err := os.Mkdir(img, 0o700); err != nil {
		t.Fatal(err)
	}
	// As a snapshot would take it: held still by runsc pause (while the
	// files are copied), checkpointed, and left so.
	must(rs("pause", root))
	start := time.Now()
	must(rs("checkpoint", "--leave-running", "--image-path", img, root))
	ckpt := time.Since(start)
	if out, _ := rs("state", root).Output(); !bytes.Contains(out, []byte(`"paused"`)) {
		t.Fatalf("after checkpoint --leave-running of a paused sandbox: %s", out)
	}
	at := map[string]int{}
	for _, n := range names {
		at[n] = read(n)
	}
	var size int64
	entries, _ := os.ReadDir(img)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			size += fi.Size()
		}
	}
	// The sandbox first (deleting a container of a paused sandbox waits
	// for it to run again), which ends the other container with it.
	must(rs("delete", "--force", root))
	_ = rs("delete", "--force", sub).Run()

	start = time.Now()
	must(rs("restore", "--image-path", img, "--bundle", bundles[root2], "--detach", root2))
	subOut := filepath.Join(base, "sub-out-2")
	mustTo(rs("restore", "--image-path", img, "--bundle", bundles[sub2], "--detach", sub2), subOut)
	rest := time.Since(start)
	t.Logf("checkpoint %v, image %d bytes; restore of both containers %v", ckpt.Round(time.Millisecond), size, rest.Round(time.Millisecond))

	time.Sleep(1500 * time.Millisecond)
	for _, n := range []string{"sub", "subchild"} {
		// Counting on from the checkpoint's count: the variable came
		// back with the process.
		if v := read(n); v <= at[n] {
			t.Errorf("%s: %d after the restore, %d at the checkpoint: the sub-container's process did not come back", n, v, at[n])
		}
	}
	for _, n := range []string{"fg", "daemon"} {
		if v := read(n); v != at[n] {
			t.Errorf("%s: %d after the restore, %d at the checkpoint: a process of runsc exec came back (doc.go's \"Detached commands and memory snapshots\" is out of date)", n, v, at[n])
		}
	}
	// The second container's output goes to its restore's stdout (a
	// regular file written at the offset the image kept: gVisor's own,
	// the bytes before it zero).
	out, _ := os.ReadFile(subOut)
	lines := strings.Fields(strings.TrimLeft(string(out), "\x00"))
	if n := len(lines); n == 0 || lines[0] != strconv.Itoa(at["sub"]+1) {
		t.Errorf("the restored container's output: %q, its count at the checkpoint %d", out, at["sub"])
	}
	ps, err = rs("exec", root2, "/bin/ps", "-o", "stat,args").Output()
	if err != nil {
		t.Fatalf("ps after the restore: %v", err)
	}
	for _, l := range strings.Split(string(ps), "\n") {
		if strings.Contains(l, "i=1000") || strings.Contains(l, "i=2000") {
			if !strings.HasPrefix(strings.TrimSpace(l), "Z") {
				t.Errorf("after the restore, alive: %s", l)
			}
		}
	}
}

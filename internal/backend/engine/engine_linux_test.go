package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentkernel/agentkernel/bench/harness"
	"github.com/agentkernel/agentkernel/internal/backend/engine"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/image/imagetest"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// capNumbers are the capabilities' bit numbers (linux/capability.h).
var capNumbers = map[string]uint{
	"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3, "CAP_FSETID": 4,
	"CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8, "CAP_LINUX_IMMUTABLE": 9,
	"CAP_NET_BIND_SERVICE": 10, "CAP_NET_BROADCAST": 11, "CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13,
	"CAP_IPC_LOCK": 14, "CAP_IPC_OWNER": 15, "CAP_SYS_MODULE": 16, "CAP_SYS_RAWIO": 17,
	"CAP_SYS_CHROOT": 18, "CAP_SYS_PTRACE": 19, "CAP_SYS_PACCT": 20, "CAP_SYS_ADMIN": 21,
	"CAP_SYS_BOOT": 22, "CAP_SYS_NICE": 23, "CAP_SYS_RESOURCE": 24, "CAP_SYS_TIME": 25,
	"CAP_SYS_TTY_CONFIG": 26, "CAP_MKNOD": 27, "CAP_LEASE": 28, "CAP_AUDIT_WRITE": 29,
	"CAP_AUDIT_CONTROL": 30, "CAP_SETFCAP": 31,
}

// fixture is one engine under test with the store's busybox image.
type fixture struct {
	name   string
	host   string
	rootfs image.Rootfs
	store  *image.Store
	warns  *[]string
	mu     *sync.Mutex
	tmp    string
	loaded *int
}

func (f *fixture) backend(allowed ...string) *engine.Backend {
	opts := engine.Options{
		Host: f.host,
		Archive: func(ctx context.Context, r image.Rootfs, ref string, w io.Writer) error {
			f.mu.Lock()
			*f.loaded++
			f.mu.Unlock()
			return f.store.WriteArchive(ctx, image.ExportSource{Layers: r.Layers, IDMap: r.IDMap, BaseDigest: r.Digest, Config: r.Config}, ref, w)
		},
		Warn: func(s string) {
			f.mu.Lock()
			*f.warns = append(*f.warns, s)
			f.mu.Unlock()
		},
		AllowDegraded: func() []string { return allowed },
		DataDir:       filepath.Join(f.tmp, "data"),
	}
	if f.name == "docker" {
		return engine.Docker(opts)
	}
	return engine.Podman(opts)
}

// spec resolves profile's spec for args as a run would, on loopback.
func (f *fixture) spec(t *testing.T, profile string, args ...string) *sandbox.Spec {
	t.Helper()
	cwd := filepath.Join(f.tmp, "project")
	_ = os.MkdirAll(cwd, 0o755)
	spec, _, err := policy.Resolve(policy.Input{
		Overrides: policy.Overrides{Profile: profile, Image: "busybox:test", NoNetwork: true, Hostname: "enginetest"},
		Args:      args,
		Cwd:       cwd,
		HomeDir:   filepath.Join(f.tmp, "home"),
		HostEnv:   func(string) (string, bool) { return "", false },
	})
	if err != nil {
		t.Fatal(err)
	}
	spec.ID = fmt.Sprintf("t%d", time.Now().UnixNano())
	spec.Rootfs = f.rootfs
	return spec
}

// run runs spec on f's engine, then checks the container is gone.
func (f *fixture) run(t *testing.T, ctx context.Context, spec *sandbox.Spec, stdin string, out io.Writer) (sandbox.Result, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	stdio := sandbox.Stdio{Stdout: &stdout, Stderr: &stderr}
	if out != nil {
		stdio.Stdout = io.MultiWriter(&stdout, out)
	}
	if stdin != "" {
		stdio.Stdin = strings.NewReader(stdin)
	}
	res, err := f.backend(config.DegradeLandlock).Run(ctx, spec, stdio)
	f.assertGone(t, spec.ID)
	return res, stdout.String() + stderr.String(), err
}

// assertGone fails unless no container of the run's id is left.
func (f *fixture) assertGone(t *testing.T, id string) {
	t.Helper()
	cli, err := client.New(client.WithHost(f.host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	l, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", engine.LabelID+"="+id)})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 0 {
		t.Errorf("%s: the run's container is still there: %+v", f.name, l.Items)
	}
	v, err := cli.VolumeList(context.Background(), client.VolumeListOptions{Filters: client.Filters{}.Add("label", engine.LabelID+"="+id)})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Items) != 0 {
		t.Errorf("%s: the run's volumes are still there: %+v", f.name, v.Items)
	}
	if left, _ := filepath.Glob(filepath.Join(f.tmp, "data", "engine", "*")); len(left) != 0 {
		t.Errorf("%s: run directories left: %v", f.name, left)
	}
}

func engines(t *testing.T) []*fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "the engine tests start their own dockerd and podman service: run them as root")
	}
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "ake")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Registered first, so run last: after the engines stopped.
		if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(b), " "+tmp+"/") {
			t.Errorf("mounts left under %s", tmp)
		}
		_ = os.RemoveAll(tmp)
	})
	reg := imagetest.NewRegistry(t)
	ref := imagetest.PushBusybox(t, reg.Host, "busybox:test")
	store, err := image.Open(filepath.Join(tmp, "store"), image.Options{IDMap: image.DefaultIDMap()})
	if err != nil {
		t.Fatal(err)
	}
	rootfs, err := store.Ensure(ctx, ref, image.PullMissing)
	if err != nil {
		t.Fatal(err)
	}
	var fs []*fixture
	for _, name := range []string{"docker", "podman"} {
		start := harness.StartPrivateDocker
		if name == "podman" {
			start = harness.StartPodmanService
		}
		host, stop, err := start(filepath.Join(tmp, name))
		if err != nil {
			testenv.Missing(t, "%s: %v", name, err)
		}
		t.Cleanup(stop)
		logPath := filepath.Join(tmp, name, name+".log")
		if name == "docker" {
			logPath = filepath.Join(tmp, name, "dockerd.log")
		}
		t.Cleanup(func() {
			if b, err := os.ReadFile(logPath); err == nil && t.Failed() {
				lines := strings.Split(string(b), "\n")
				t.Logf("%s's log, last lines:\n%s", name, strings.Join(lines[max(0, len(lines)-15):], "\n"))
			}
		})
		var mu sync.Mutex
		fs = append(fs, &fixture{name: name, host: host, rootfs: rootfs, store: store, warns: new([]string), mu: &mu,
			tmp: filepath.Join(tmp, name), loaded: new(int)})
	}
	return fs
}

// statusField is field's value in /proc/self/status text.
func statusField(out, field string) string {
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func TestEngineRun(t *testing.T) {
	for _, f := range engines(t) {
		t.Run(f.name, func(t *testing.T) { testEngine(t, f) })
	}
}

func testEngine(t *testing.T, f *fixture) {
	ctx := context.Background()
	t.Run("echo", func(t *testing.T) {
		res, out, err := f.run(t, ctx, f.spec(t, "permissive", "echo", "hello"), "", nil)
		if err != nil || res.ExitCode != 0 || out != "hello\n" {
			t.Fatalf("res %+v, out %q, err %v", res, out, err)
		}
		// The image went in once; the next runs find it by its digest.
		if *f.loaded != 1 {
			t.Errorf("image loaded %d times", *f.loaded)
		}
	})
	t.Run("exit code", func(t *testing.T) {
		res, out, err := f.run(t, ctx, f.spec(t, "permissive", "sh", "-c", "echo err >&2; exit 3"), "", nil)
		if err != nil || res.ExitCode != 3 || out != "err\n" {
			t.Fatalf("res %+v, out %q, err %v", res, out, err)
		}
	})
	t.Run("not found", func(t *testing.T) {
		_, _, err := f.run(t, ctx, f.spec(t, "permissive", "/no/such/command"), "", nil)
		if !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("err %v, want ErrNotFound (exit 127)", err)
		}
	})
	t.Run("cannot invoke", func(t *testing.T) {
		_, _, err := f.run(t, ctx, f.spec(t, "permissive", "/etc/passwd"), "", nil)
		if !errors.Is(err, sandbox.ErrCannotInvoke) {
			t.Fatalf("err %v, want ErrCannotInvoke (exit 126)", err)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		res, out, err := f.run(t, ctx, f.spec(t, "permissive", "sh", "-c", "tr a-z A-Z; echo done"), "piped in\n", nil)
		if err != nil || res.ExitCode != 0 || out != "PIPED IN\ndone\n" {
			t.Fatalf("res %+v, out %q, err %v", res, out, err)
		}
	})
	t.Run("env workdir user", func(t *testing.T) {
		s := f.spec(t, "permissive", "sh", "-c", `echo "$FOO $(pwd) $(id -u):$(id -g) $(hostname)"`)
		s.Env = append(s.Env, "FOO=bar baz")
		s.Workdir = "/home/app"
		s.User = "1000:1000"
		res, out, err := f.run(t, ctx, s, "", nil)
		if err != nil || res.ExitCode != 0 || out != "bar baz /home/app 1000:1000 enginetest\n" {
			t.Fatalf("res %+v, out %q, err %v", res, out, err)
		}
	})
	for _, profile := range []string{"permissive", "restrictive"} {
		t.Run("fences "+profile, func(t *testing.T) {
			s := f.spec(t, profile, "cat", "/proc/self/status")
			res, out, err := f.run(t, ctx, s, "", nil)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("res %+v, out %q, err %v", res, out, err)
			}
			var want uint64
			for _, c := range s.Security.Capabilities {
				n, ok := capNumbers[c]
				if !ok {
					t.Fatalf("capability %s not in the test's table", c)
				}
				want |= 1 << n
			}
			if got := statusField(out, "CapEff"); got != fmt.Sprintf("%016x", want) {
				t.Errorf("CapEff %s, want %016x (%v)", got, want, s.Security.Capabilities)
			}
			if got := statusField(out, "CapBnd"); got != fmt.Sprintf("%016x", want) {
				t.Errorf("CapBnd %s, want %016x", got, want)
			}
			if got := statusField(out, "NoNewPrivs"); got != "1" {
				t.Errorf("NoNewPrivs %q, want 1", got)
			}
			if got := statusField(out, "Seccomp"); got != "2" {
				t.Errorf("Seccomp %q, want 2 (filter)", got)
			}
		})
	}
	t.Run("attack: a user other than root holds no capability", func(t *testing.T) {
		// Podman would give uid 1000 the profile's capabilities in its
		// effective and ambient sets: setuid(0) from there.
		for _, profile := range []string{"permissive", "moderate"} {
			s := f.spec(t, profile, "cat", "/proc/self/status")
			s.User = "1000:1000"
			res, out, err := f.run(t, ctx, s, "", nil)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("%s: res %+v, out %q, err %v", profile, res, out, err)
			}
			for _, field := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
				if got := statusField(out, field); got != "0000000000000000" {
					t.Errorf("%s: uid 1000's %s is %s", profile, field, got)
				}
			}
		}
	})
	t.Run("attack: namespaces and mounts refused", func(t *testing.T) {
		// docker's profile without CAP_SYS_ADMIN refuses unshare, the
		// allowlist refuses it and mount outright.
		for _, profile := range []string{"permissive", "restrictive"} {
			s := f.spec(t, profile, "sh", "-c", "unshare -U -r true && echo UNSHARED; mount -t tmpfs t /mnt && echo MOUNTED; echo end")
			res, out, err := f.run(t, ctx, s, "", nil)
			if err != nil || res.ExitCode != 0 || strings.Contains(out, "UNSHARED") || strings.Contains(out, "MOUNTED") || !strings.Contains(out, "end") {
				t.Errorf("%s: res %+v, out %q, err %v", profile, res, out, err)
			}
		}
	})
	t.Run("attack: allowlist refuses a netlink socket", func(t *testing.T) {
		s := f.spec(t, "restrictive", "sh", "-c", "ip link 2>&1; echo rc=$?")
		_, out, err := f.run(t, ctx, s, "", nil)
		if err != nil || !strings.Contains(out, "socket: Operation not permitted") || strings.Contains(out, "lo:") {
			t.Errorf("out %q, err %v", out, err)
		}
	})
	t.Run("read-only root", func(t *testing.T) {
		s := f.spec(t, "restrictive", "sh", "-c", "touch /x 2>&1; echo rc=$?; touch /tmp/y && echo tmp-ok")
		if !s.ReadOnlyRoot {
			t.Fatal("restrictive has no read-only root")
		}
		_, out, err := f.run(t, ctx, s, "", nil)
		if err != nil || !strings.Contains(out, "Read-only file system") || !strings.Contains(out, "rc=1") || !strings.Contains(out, "tmp-ok") {
			t.Fatalf("out %q, err %v", out, err)
		}
	})
	t.Run("memory limit", func(t *testing.T) {
		s := f.spec(t, "permissive", "sh", "-c", "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
		s.Resources.MemoryMB = 96
		_, out, err := f.run(t, ctx, s, "", nil)
		if err != nil || strings.TrimSpace(out) != strconv.Itoa(96<<20) {
			t.Fatalf("out %q, err %v", out, err)
		}
	})
	t.Run("loopback only", func(t *testing.T) {
		_, out, err := f.run(t, ctx, f.spec(t, "permissive", "cat", "/proc/net/dev"), "", nil)
		var ifaces []string
		for i, l := range strings.Split(out, "\n") {
			if name, _, ok := strings.Cut(l, ":"); ok && i >= 2 {
				ifaces = append(ifaces, strings.TrimSpace(name))
			}
		}
		if err != nil || len(ifaces) != 1 || ifaces[0] != "lo" {
			t.Fatalf("interfaces %v (out %q), err %v", ifaces, out, err)
		}
	})
	t.Run("bind mount", func(t *testing.T) {
		dir := filepath.Join(f.tmp, "vol")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "in"), []byte("from host\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s := f.spec(t, "permissive", "sh", "-c", "cat /data/in; echo from sandbox > /data/out; (echo x > /ro/x) 2>/dev/null || echo ro-refused")
		s.Mounts = append(s.Mounts, sandbox.Mount{Kind: sandbox.MountBind, Source: dir, Dest: "/data"},
			sandbox.Mount{Kind: sandbox.MountBind, Source: dir, Dest: "/ro", ReadOnly: true})
		_, out, err := f.run(t, ctx, s, "", nil)
		if err != nil || out != "from host\nro-refused\n" {
			t.Fatalf("out %q, err %v", out, err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "out")); string(b) != "from sandbox\n" {
			t.Errorf("host file %q", b)
		}
	})
	t.Run("copy-on-write workspace", func(t *testing.T) {
		// moderate, the default profile, shows the project at
		// /workspace through a copy-on-write mount.
		project := filepath.Join(f.tmp, "project")
		if err := os.WriteFile(filepath.Join(project, "in"), []byte("from host\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(project, "gone"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(project, 0o750); err != nil {
			t.Fatal(err)
		}
		before := treeOf(t, project)
		s := f.spec(t, "moderate", "sh", "-c", "cat /workspace/in; echo changed > /workspace/in; echo new > /workspace/new; rm /workspace/gone; "+
			"mkdir /workspace/d && echo deep > /workspace/d/f; cat /workspace/in /workspace/new /workspace/d/f; ls /workspace; stat -c %a /workspace")
		var cow bool
		for _, m := range s.Mounts {
			cow = cow || (m.Kind == sandbox.MountCopyOnWrite && m.Dest == "/workspace" && m.Source == project)
		}
		if !cow {
			t.Fatalf("moderate has no copy-on-write /workspace: %+v", s.Mounts)
		}
		res, out, err := f.run(t, ctx, s, "", nil)
		if err != nil || res.ExitCode != 0 || out != "from host\nchanged\nnew\ndeep\nd\nin\nnew\n750\n" {
			t.Fatalf("res %+v, out %q, err %v", res, out, err)
		}
		if after := treeOf(t, project); after != before {
			t.Errorf("the host directory changed:\n%s\nwas\n%s", after, before)
		}
		// The next run starts from the host directory again.
		res, out, err = f.run(t, ctx, f.spec(t, "moderate", "sh", "-c", "cat /workspace/in; ls /workspace"), "", nil)
		if err != nil || res.ExitCode != 0 || out != "from host\ngone\nin\n" {
			t.Fatalf("second run: res %+v, out %q, err %v", res, out, err)
		}
	})
	t.Run("attack: copy-on-write paths the overlay options cannot carry", func(t *testing.T) {
		for _, src := range []string{"/tmp/a,upperdir=/etc", "/tmp/a:/etc", `/tmp/a\:b`} {
			s := f.spec(t, "moderate", "true")
			s.Mounts = append(s.Mounts, sandbox.Mount{Kind: sandbox.MountCopyOnWrite, Source: src, Dest: "/x"})
			_, err := f.backend(config.DegradeLandlock).Run(ctx, s, sandbox.Stdio{})
			if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "overlay") {
				t.Errorf("%s: err %v", src, err)
			}
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		s := f.spec(t, "permissive", "sh", "-c", "echo started; sleep 100; echo not-killed")
		start := time.Now()
		res, out, err := f.run(t, cctx, s, "", writerFunc(func(p []byte) {
			if bytes.Contains(p, []byte("started")) {
				cancel()
			}
		}))
		if err != nil || res.ExitCode != 137 || strings.Contains(out, "not-killed") || time.Since(start) > 60*time.Second {
			t.Fatalf("res %+v, out %q, err %v", res, out, err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		s := f.spec(t, "permissive", "sleep", "100")
		s.Resources.Timeout = time.Second
		res, _, err := f.run(t, ctx, s, "", nil)
		if err != nil || !res.TimedOut {
			t.Fatalf("res %+v, err %v", res, err)
		}
	})
	t.Run("landlock refused unless allowed", func(t *testing.T) {
		_, err := f.backend().Run(ctx, f.spec(t, "permissive", "true"), sandbox.Stdio{})
		if err == nil || !strings.Contains(err.Error(), "allow_degraded") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("egress refused", func(t *testing.T) {
		s := f.spec(t, "permissive", "true")
		s.Network.Mode = sandbox.NetworkFull
		_, err := f.backend(config.DegradeLandlock).Run(ctx, s, sandbox.Stdio{})
		if !errors.Is(err, sandbox.ErrUnsupported) {
			t.Fatalf("err %v", err)
		}
	})
}

// treeOf describes every file under dir: path, mode, owner, content.
func treeOf(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		// Not the access time: reading through the overlay may set it.
		fmt.Fprintf(&b, "%s %v %d:%d %d %v %v", p, fi.Mode(), st.Uid, st.Gid, fi.Size(), st.Mtim, st.Ctim)
		if fi.Mode().IsRegular() {
			c, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %q", c)
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

type writerFunc func([]byte)

func (w writerFunc) Write(p []byte) (int, error) { w(p); return len(p), nil }

// TestEngineMissing: an engine that does not answer is one clear line
// naming its address and how to start it.
func TestEngineMissing(t *testing.T) {
	for _, b := range []*engine.Backend{
		engine.Docker(engine.Options{Host: "unix:///nonexistent/docker.sock", AllowDegraded: func() []string { return []string{config.DegradeLandlock} }}),
		engine.Podman(engine.Options{Host: "/nonexistent/podman.sock", AllowDegraded: func() []string { return []string{config.DegradeLandlock} }}),
	} {
		spec := &sandbox.Spec{ID: "x", Args: []string{"true"}, Rootfs: image.Rootfs{Ref: "busybox", Digest: "sha256:" + strings.Repeat("a", 64)},
			Security: sandbox.Security{Seccomp: sandbox.SeccompDefault}}
		_, err := b.Run(context.Background(), spec, sandbox.Stdio{})
		if err == nil || !strings.Contains(err.Error(), "/nonexistent/") || !strings.Contains(err.Error(), "start") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: err %v", b.Name(), err)
		}
	}
}

func TestDefaultHost(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		engine string
		env    map[string]string
		uid    int
		want   string
	}{
		{"docker", nil, 0, "unix:///var/run/docker.sock"},
		{"docker", map[string]string{"DOCKER_HOST": "tcp://h:2375"}, 1000, "tcp://h:2375"},
		{"podman", nil, 0, "unix:///run/podman/podman.sock"},
		{"podman", map[string]string{"XDG_RUNTIME_DIR": "/run/user/1000"}, 1000, "unix:///run/user/1000/podman/podman.sock"},
		{"podman", nil, 1001, "unix:///run/user/1001/podman/podman.sock"},
		{"podman", map[string]string{"CONTAINER_HOST": "unix:///x.sock", "DOCKER_HOST": "unix:///y"}, 0, "unix:///x.sock"},
	} {
		if got := engine.DefaultHost(c.engine, env(c.env), c.uid); got != c.want {
			t.Errorf("%s %v uid %d: %s, want %s", c.engine, c.env, c.uid, got, c.want)
		}
	}
}

package gvisor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// busyboxLayer makes an image layer of the host's static busybox: the
// test's own image, in a directory as the store unpacks one.
func busyboxLayer(t *testing.T) string {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		testenv.Missing(t, "/bin/busybox: %v (apt-get install busybox-static)", err)
	}
	layer := t.TempDir()
	for _, d := range []string{"bin", "etc", "tmp"} {
		if err := os.Mkdir(filepath.Join(layer, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(layer, "bin/busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"sh", "sleep", "echo", "cat", "true", "hostname"} {
		if err := os.Symlink("busybox", filepath.Join(layer, "bin", c)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(layer, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return layer
}

// needRunsc ends the test unless it can run runsc: root and a runsc.
func needRunsc(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	if _, err := findRunsc(); err != nil {
		testenv.Missing(t, "%v", err)
	}
}

func testSpec(layer string, args ...string) *sandbox.Spec {
	spec := &sandbox.Spec{
		ID:       "test",
		Args:     args,
		Hostname: "gvisor-test",
		Network:  sandbox.Network{Mode: sandbox.NetworkNone},
		Security: sandbox.Security{Capabilities: []string{"CAP_CHOWN"}, NoNewPrivs: true},
	}
	spec.Rootfs.Layers = []string{layer}
	return spec
}

// TestRunCancelled: a run whose context is cancelled while its command
// runs ends at once, and leaves no runsc process, mount, cgroup or
// directory behind.
func TestRunCancelled(t *testing.T) {
	needRunsc(t)
	layer := busyboxLayer(t)
	dataDir := t.TempDir()
	b := New(Options{DataDir: dataDir})
	spec := testSpec(layer, "sh", "-c", "echo up; sleep 60")
	spec.Resources = sandbox.Resources{MemoryMB: 256, PIDs: 64}
	cancel, done := startRun(t, b, spec, "up\n")
	// The sandbox runs: its directory, its runsc processes and its
	// cgroup exist (the checks below see them).
	if left := leftovers(dataDir); len(left) == 0 {
		t.Fatal("a running sandbox shows nothing: the leftover check sees nothing")
	}
	start := time.Now()
	cancel()
	var o runOutcome
	select {
	case o = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	if !errors.Is(o.err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v %+v", o.err, o.res)
	}
	t.Logf("Run returned %v after the cancel", time.Since(start).Round(time.Millisecond))
	if left := leftovers(dataDir); len(left) > 0 {
		t.Fatalf("left behind:\n%s", strings.Join(left, "\n"))
	}
}

// runOutcome is what a background Run returned.
type runOutcome struct {
	res sandbox.Result
	err error
}

// startRun runs spec in the background until its command has written
// want (the rest of its output is discarded), and returns the run's
// cancel and where its outcome arrives.
func startRun(t *testing.T, b *Backend, spec *sandbox.Spec, want string) (context.CancelFunc, <-chan runOutcome) {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan runOutcome, 1)
	go func() {
		res, err := b.Run(ctx, spec, sandbox.Stdio{Stdout: pw, Stderr: os.Stderr})
		pw.Close()
		done <- runOutcome{res, err}
	}()
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(pr, buf); err != nil || string(buf) != want {
		t.Fatalf("the command did not start: %q %v", buf, err)
	}
	go io.Copy(io.Discard, pr)
	return cancel, done
}

// TestRunStatus: the command's status, output and a not-found command.
func TestRunStatus(t *testing.T) {
	needRunsc(t)
	layer := busyboxLayer(t)
	b := New(Options{DataDir: t.TempDir()})
	spec := testSpec(layer, "sh", "-c", "hostname; exit 7")
	var out bytes.Buffer
	res, err := b.Run(context.Background(), spec, sandbox.Stdio{Stdout: &out, Stderr: os.Stderr})
	if err != nil || res.ExitCode != 7 || out.String() != "gvisor-test\n" {
		t.Fatalf("want exit 7 and the host name: %+v %v %q", res, err, out.String())
	}
	spec.Args = []string{"nope"}
	if _, err := b.Run(context.Background(), spec, sandbox.Stdio{Stdout: &out, Stderr: os.Stderr}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("want ErrNotFound, got %v", err)
	}
}

// leftovers lists what runs under dataDir still hold once their
// processes have had time to end (up to 10 s: a mount namespace goes
// with the last of its processes and threads, which the kernel reaps
// after the call that ended them has returned, later on a loaded machine).
func leftovers(dataDir string) []string {
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := leftoversNow(dataDir)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leftoversNow lists what runs under dataDir hold: runsc processes naming
// it, mounts of it in any mount namespace, run directories, cgroups.
func leftoversNow(dataDir string) []string {
	var left []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	seen := map[string]bool{}
	for _, p := range procs {
		cmd, _ := os.ReadFile(p + "/cmdline")
		if bytes.Contains(cmd, []byte("runsc")) && bytes.Contains(cmd, []byte(dataDir)) {
			left = append(left, "process: "+strings.ReplaceAll(string(cmd), "\x00", " "))
		}
		ns, err := os.Readlink(p + "/ns/mnt")
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		mi, _ := os.ReadFile(p + "/mountinfo")
		for _, line := range strings.Split(string(mi), "\n") {
			if strings.Contains(line, dataDir) {
				left = append(left, "mount: "+line)
			}
		}
	}
	runs, _ := filepath.Glob(filepath.Join(dataDir, "gvisor", "agentkernel-*"))
	left = append(left, runs...)
	for _, pat := range []string{"/sys/fs/cgroup/*/agentkernel-gvisor-*", "/sys/fs/cgroup/*/*/*/agentkernel-gvisor-*"} {
		cgs, _ := filepath.Glob(pat)
		left = append(left, cgs...)
	}
	return left
}

// TestRunscPin: scripts/runsc.sh builds the version the backend names.
func TestRunscPin(t *testing.T) {
	b, err := os.ReadFile("../../../scripts/runsc.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`AGENTKERNEL_RUNSC_VERSION:-(v[^}]+)}`).FindSubmatch(b)
	if m == nil || string(m[1]) != RunscVersion {
		t.Fatalf("scripts/runsc.sh pins %q, the backend %q", m, RunscVersion)
	}
}

func TestTooOld(t *testing.T) {
	for _, c := range []struct {
		version string
		old     bool
	}{
		{"runsc version release-20220228.0\nspec: 1.0.2\n", true},
		{"runsc version release-20240513.0\nspec: 1.1.0\n", false},
		{"runsc version VERSION_MISSING\nspec: 1.2.1\n", false},
		{"runsc version google-501234\n", false},
	} {
		if _, old := tooOld(c.version); old != c.old {
			t.Errorf("%q: too old %v, want %v", c.version, old, c.old)
		}
	}
}

// TestFailure: runsc's own failures, as its error log has them, map to
// the run's errors.
func TestFailure(t *testing.T) {
	r := &run{spec: &sandbox.Spec{Args: []string{"/x"}}}
	for _, c := range []struct {
		log  string
		want error
	}{
		{`{"msg":"running container: starting container: starting root container: starting sandbox: creating process: failed to load /x: no such file or directory","level":"error","time":"2026-11-26T14:20:26Z"}`, sandbox.ErrNotFound},
		{`{"msg":"running container: starting container: starting root container: starting sandbox: creating process: failed to load /x: permission denied","level":"error","time":"2026-11-26T14:20:28Z"}`, sandbox.ErrCannotInvoke},
		{`{"msg":"first","level":"error"}{"msg":"running container: creating container: cannot create sandbox: EOF","level":"error"}`, nil},
	} {
		p := filepath.Join(t.TempDir(), "log")
		if err := os.WriteFile(p, []byte(c.log), 0o600); err != nil {
			t.Fatal(err)
		}
		msg := runscError(p)
		if msg == "" || msg == "first" {
			t.Fatalf("%s: read %q", c.log, msg)
		}
		err := r.failure(msg)
		if c.want != nil && !errors.Is(err, c.want) || c.want == nil && (errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrCannotInvoke) || !strings.Contains(err.Error(), "cannot create sandbox")) {
			t.Errorf("%s: got %v, want %v", c.log, err, c.want)
		}
	}
	if msg := runscError(filepath.Join(t.TempDir(), "none")); msg != "" {
		t.Errorf("no log: %q", msg)
	}
}

// BenchEnv runs TestBenchPair with that many runs of each side.
const BenchEnv = "AGENTKERNEL_GVISOR_BENCH"

// TestBenchPair (AGENTKERNEL_GVISOR_BENCH=N) times Backend.Run of
// /bin/true against a bare `runsc run` of the same bundle (built once by
// the backend's own code: the same config.json, mounts and runsc
// flags), alternating one of each N times, and logs the medians: the
// backend's own cost over runsc's.
func TestBenchPair(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(BenchEnv))
	if n <= 0 {
		t.Skip("set " + BenchEnv + "=N to run")
	}
	needRunsc(t)
	layer := busyboxLayer(t)
	dataDir := t.TempDir()
	b := New(Options{DataDir: dataDir})
	spec := func() *sandbox.Spec {
		s := testSpec(layer, "/bin/true")
		s.Resources = sandbox.Resources{MemoryMB: 2048, PIDs: 1024, CPUPercent: 100}
		return s
	}
	runsc, _ := findRunsc()
	raw := &run{b: b, spec: spec(), runsc: runsc, id: "agentkernel-bench"}
	raw.dir = filepath.Join(dataDir, "gvisor", raw.id)
	if err := os.MkdirAll(raw.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	req, res := make(chan int), make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the namespace goes with the thread
		if err := raw.prepare(nil); err != nil {
			res <- err
			return
		}
		res <- nil
		for i := range req {
			state := filepath.Join(raw.dir, "state"+strconv.Itoa(i))
			if err := os.Mkdir(state, 0o700); err != nil {
				res <- err
				continue
			}
			cmd := raw.runCmd(state, raw.id+strconv.Itoa(i), nil)
			cmd.ExtraFiles = []*os.File{os.Stderr}
			res <- cmd.Run()
		}
	}()
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	defer close(req)
	var backend, bare []time.Duration
	for i := 0; i < n+1; i++ {
		start := time.Now()
		r, err := b.Run(context.Background(), spec(), sandbox.Stdio{})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("Backend.Run: %+v %v", r, err)
		}
		d := time.Since(start)
		start = time.Now()
		req <- i
		if err := <-res; err != nil {
			t.Fatalf("runsc run: %v", err)
		}
		if i > 0 { // the first pair warms the caches
			backend, bare = append(backend, d), append(bare, time.Since(start))
		}
	}
	med := func(ds []time.Duration) time.Duration { slices.Sort(ds); return ds[len(ds)/2] }
	mb, mr := med(backend), med(bare)
	t.Logf("%d runs each, alternating: Backend.Run median %v, runsc run median %v, ratio %.2f",
		n, mb.Round(time.Millisecond), mr.Round(time.Millisecond), float64(mb)/float64(mr))
}

// TestHostileMountPoint: an image whose mount point is a symbolic link
// out of its root does not make runsc create or mount anything at the
// link's target on the host.
func TestHostileMountPoint(t *testing.T) {
	needRunsc(t)
	layer := busyboxLayer(t)
	target := filepath.Join(t.TempDir(), "escaped")
	for _, name := range []string{"abs", "rel"} {
		link := target + "-" + name
		dest := link
		if name == "rel" {
			dest = "../../../../../../../../.." + link
		}
		if err := os.Symlink(dest, filepath.Join(layer, name)); err != nil {
			t.Fatal(err)
		}
	}
	vol := t.TempDir()
	b := New(Options{DataDir: t.TempDir()})
	spec := testSpec(layer, "sh", "-c", "ls -la /abs /rel; true")
	spec.Mounts = []sandbox.Mount{
		{Kind: sandbox.MountBind, Source: vol, Dest: "/abs/sub"},
		{Kind: sandbox.MountBind, Source: vol, Dest: "/rel/sub"},
	}
	var out bytes.Buffer
	res, err := b.Run(context.Background(), spec, sandbox.Stdio{Stdout: &out, Stderr: &out})
	t.Logf("%+v %v\n%s", res, err, out.String())
	for _, name := range []string{"abs", "rel"} {
		if _, err := os.Lstat(target + "-" + name); err == nil {
			t.Errorf("runsc created %s on the host through the image's symbolic link", target+"-"+name)
		}
	}
}

// overlaysOf lists the overlays whose upper layer is under dataDir, in
// any mount namespace: whether each is volatile, by upper layer.
func overlaysOf(dataDir string) map[string]bool {
	out := map[string]bool{}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		mi, _ := os.ReadFile(p + "/mountinfo")
		for _, line := range strings.Split(string(mi), "\n") {
			f := strings.Fields(line)
			i := slices.Index(f, "-")
			if i < 0 || len(f) < i+4 || f[i+1] != "overlay" {
				continue
			}
			upper, volatile := "", false
			for _, o := range strings.Split(f[i+3], ",") {
				switch {
				case strings.HasPrefix(o, "upperdir="):
					upper = strings.TrimPrefix(o, "upperdir=")
				case o == "volatile" || o == "fsync=volatile": // the kernel's two spellings
					volatile = true
				}
			}
			if strings.HasPrefix(upper, dataDir+"/") {
				out[upper] = volatile
			}
		}
	}
	return out
}

// TestRunOverlaysVolatile: a run's overlays (the root and a copy-on-write
// volume), whose upper layers are removed unread with the run, are
// mounted volatile (no sync of the data directory's file system when
// they go); the root's is in the run's scratch tmpfs, which the host
// never sees; the volume's writes still reach the command and never the
// host's directory.
func TestRunOverlaysVolatile(t *testing.T) {
	needRunsc(t)
	layer := busyboxLayer(t)
	dataDir := t.TempDir()
	proj := t.TempDir()
	b := New(Options{DataDir: dataDir})
	spec := testSpec(layer, "sh", "-c", "echo new > /workspace/f; cat /workspace/f; echo up; sleep 60")
	spec.Mounts = []sandbox.Mount{{Kind: sandbox.MountCopyOnWrite, Source: proj, Dest: "/workspace"}}
	cancel, done := startRun(t, b, spec, "new\nup\n")
	ovs := overlaysOf(dataDir)
	scratch, _ := filepath.Glob(filepath.Join(dataDir, "gvisor", "agentkernel-*", "scratch", "*"))
	cancel()
	if err := (<-done).err; !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if len(ovs) != 2 {
		t.Fatalf("want the root's and the volume's overlays, got %v", ovs)
	}
	inScratch := false
	for upper, volatile := range ovs {
		if !volatile {
			t.Errorf("the overlay of %s is not volatile", upper)
		}
		inScratch = inScratch || strings.HasSuffix(upper, "/scratch/upper")
	}
	// The root's upper layer is in the run's scratch tmpfs, which the
	// host's mount table never holds.
	if !inScratch {
		t.Errorf("the root's upper layer is not in the run's scratch directory: %v", ovs)
	}
	if len(scratch) > 0 {
		t.Errorf("the host sees the run's scratch files: %v", scratch)
	}
	if _, err := os.Stat(filepath.Join(proj, "f")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the volume's write reached the host's directory: %v", err)
	}
	if left := leftovers(dataDir); len(left) > 0 {
		t.Fatalf("left behind:\n%s", strings.Join(left, "\n"))
	}
}

// tmpfsMountsOf lists the tmpfs mount points under dataDir, in any mount
// namespace.
func tmpfsMountsOf(dataDir string) map[string]bool {
	out := map[string]bool{}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		mi, _ := os.ReadFile(p + "/mountinfo")
		for _, line := range strings.Split(string(mi), "\n") {
			f := strings.Fields(line)
			i := slices.Index(f, "-")
			if i < 5 || len(f) < i+2 || f[i+1] != "tmpfs" {
				continue
			}
			if strings.HasPrefix(f[4], dataDir+"/") {
				out[f[4]] = true
			}
		}
	}
	return out
}

// TestRunScratchFallback: a run's bundle and root upper layer are in
// the scratch tmpfs of its mount namespace where that tmpfs holds the
// overlay's extended attributes (this kernel's does: the normal case
// below asserts it), and in the run's directory on disk where it does
// not, with nothing for the user to see. A kernel built without
// CONFIG_TMPFS_XATTR cannot be had here, so the second case makes the
// probe fail through the backend's noScratchXattr (the probe's mount,
// its failure's unmount and the on-disk layout are the real ones). Both
// runs give their command's output and status, and leave nothing.
func TestRunScratchFallback(t *testing.T) {
	needRunsc(t)
	layer := busyboxLayer(t)
	for _, onDisk := range []bool{false, true} {
		name := "tmpfs"
		if onDisk {
			name = "disk"
		}
		t.Run(name, func(t *testing.T) {
			dataDir := t.TempDir()
			b := New(Options{DataDir: dataDir})
			b.noScratchXattr = onDisk
			spec := testSpec(layer, "sh", "-c", "hostname; echo up; read x; echo got $x; exit 3")
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			type outcome struct {
				res sandbox.Result
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := b.Run(context.Background(), spec, sandbox.Stdio{Stdin: inR, Stdout: outW, Stderr: os.Stderr})
				outW.Close()
				done <- outcome{res, err}
			}()
			want := "gvisor-test\nup\n"
			buf := make([]byte, len(want))
			if _, err := io.ReadFull(outR, buf); err != nil || string(buf) != want {
				inW.Close()
				t.Fatalf("the command did not start: %q %v", buf, err)
			}
			ovs := overlaysOf(dataDir)
			tmpfs := tmpfsMountsOf(dataDir)
			runs, _ := filepath.Glob(filepath.Join(dataDir, "gvisor", "agentkernel-*"))
			if _, err := io.WriteString(inW, "go\n"); err != nil {
				t.Fatal(err)
			}
			inW.Close()
			rest, _ := io.ReadAll(outR)
			o := <-done
			if o.err != nil || o.res.ExitCode != 3 || string(rest) != "got go\n" {
				t.Fatalf("want exit 3 and %q: %+v %v %q", "got go\n", o.res, o.err, rest)
			}
			if len(runs) != 1 {
				t.Fatalf("want one run's directory, got %v", runs)
			}
			dir := runs[0]
			wantUpper := dir + "/scratch/upper"
			if onDisk {
				wantUpper = dir + "/upper"
			}
			if len(ovs) != 1 || !ovs[wantUpper] {
				t.Errorf("want the root's volatile overlay with its upper layer at %s, got %v", wantUpper, ovs)
			}
			if got := tmpfs[dir+"/scratch"]; got != !onDisk {
				t.Errorf("a tmpfs on the run's scratch directory: %v, want %v (tmpfs mounts: %v)", got, !onDisk, tmpfs)
			}
			if left := leftovers(dataDir); len(left) > 0 {
				t.Fatalf("left behind:\n%s", strings.Join(left, "\n"))
			}
		})
	}
}

// TestRunRootOverlayRefused: where the root overlay's mount fails with
// its upper layer on the scratch tmpfs, the run tries again with the
// layers in its directory on disk (the fallback for an overlay that
// refuses a tmpfs upper layer the xattr probe passed). This kernel's
// overlay takes a tmpfs upper layer, so the test makes both mounts fail
// the same way (a lower layer that is a file): the error is the second
// mount's, on the run's directory, and nothing is left behind.
func TestRunRootOverlayRefused(t *testing.T) {
	needRunsc(t)
	file := filepath.Join(t.TempDir(), "layer")
	if err := os.WriteFile(file, []byte("not a directory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	b := New(Options{DataDir: dataDir})
	_, err := b.Run(context.Background(), testSpec(file, "true"), sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard})
	var refused *overlayMountError
	if !errors.As(err, &refused) {
		t.Fatalf("want the overlay's mount error, got %v", err)
	}
	if want := "/bundle/rootfs"; !strings.HasSuffix(refused.dst, want) || strings.Contains(refused.dst, "/scratch/") {
		t.Errorf("want the last try on the run's directory on disk (…%s, not under scratch/), got %s", want, refused.dst)
	}
	if left := leftovers(dataDir); len(left) > 0 {
		t.Fatalf("left behind:\n%s", strings.Join(left, "\n"))
	}
}

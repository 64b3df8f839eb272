package native

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/netproc"
	"github.com/agentkernel/agentkernel/internal/netproc/helper"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// helperEnv makes the test binary run one sandbox from a JSON spec on
// stdin and exit with its exit code (used for signal and rootless tests).
const helperEnv = "AGENTKERNEL_NATIVE_TEST_HELPER"

// testImage is the busybox rootfs directory built once by TestMain.
var testImage string

func TestMain(m *testing.M) {
	if IsInit() {
		os.Exit(InitMain())
	}
	if filepath.Base(os.Args[0]) == netproc.Argv0 {
		os.Exit(helper.Main(ConfineProcess)) // the network helper (TestNetworkEgress)
	}
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	if os.Getenv(probeHelperEnv) != "" {
		os.Exit(probeHelperMain())
	}
	if d := os.Getenv("AK_BUILD_IMAGE"); d != "" {
		// Build the test image at d and exit (for benchmarks and manual runs).
		if err := buildBusybox(d, 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "ak-native-image-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testImage = filepath.Join(dir, "rootfs")
	if err := buildBusybox(testImage, 0); err != nil {
		fmt.Fprintln(os.Stderr, "building busybox image:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// helperMain runs the spec read from stdin with the helper's own stdio
// and exits with the sandbox's exit code (125 on setup errors).
func helperMain() int {
	var spec sandbox.Spec
	if err := json.Unmarshal([]byte(os.Getenv(helperEnv)), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 125
	}
	b := New(Options{DataDir: os.Getenv("AK_DATA_DIR"), Warn: func(s string) { fmt.Fprintln(os.Stderr, "warning:", s) },
		AllowDegraded: func() []string { return strings.Split(os.Getenv("AK_ALLOW_DEGRADED"), ",") }})
	res, err := b.Run(context.Background(), &spec, sandbox.Stdio{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentkernel:", err)
		return 125
	}
	if res.TimedOut {
		return 124
	}
	return res.ExitCode
}

// buildBusybox makes a minimal image directory from the host's static
// busybox: applet links, /etc/passwd (root, nobody, app:1000) and
// /etc/group, owned by the image's ids (plus shift) as the image store
// keeps them.
func buildBusybox(root string, shift int) error {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("busybox not installed (apt-get install -y busybox-static): %w", err)
	}
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "etc", "tmp", "proc", "sys", "dev", "root", "home/app", "run", "var"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		return err
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), data, 0o755); err != nil {
		return err
	}
	out, err := exec.Command(bb, "--list-full").Output()
	if err != nil {
		return err
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "bin/busybox" {
			continue
		}
		if err := os.Symlink("/bin/busybox", filepath.Join(root, p)); err != nil && !os.IsExist(err) {
			return err
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\napp:x:1000:1000:app:/home/app:/bin/sh\n",
		"etc/group":  "root:x:0:\nwheel:x:10:app\ntty:x:5:\napp:x:1000:\nnogroup:x:65534:\n",
		"etc/hosts":  "127.0.0.1 localhost\n",
		"etc/noexec": "not a program\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(root, "bin/noexec"), []byte("plain text"), 0o644); err != nil {
		return err
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		owner := shift
		if strings.HasPrefix(p, filepath.Join(root, "home/app")) {
			owner += 1000
		}
		return os.Lchown(p, owner, owner)
	})
}

// dockerCaps is docker's default capability set.
var dockerCaps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}

// newSpec is a moderate-profile-like spec running args in the busybox image.
func newSpec(args ...string) *sandbox.Spec {
	return &sandbox.Spec{
		Rootfs:   image.Rootfs{Layers: []string{testImage}},
		Args:     args,
		Hostname: "sbx",
		Network:  sandbox.Network{Mode: sandbox.NetworkNone},
		Security: sandbox.Security{Capabilities: dockerCaps, Seccomp: sandbox.SeccompDefault, NoNewPrivs: true, Landlock: true},
	}
}

// outcome is what one test run produced.
type outcome struct {
	res            sandbox.Result
	err            error
	stdout, stderr string
	elapsed        time.Duration
}

func runSpec(t testing.TB, spec *sandbox.Spec, stdin io.Reader) outcome {
	t.Helper()
	var out, errb bytes.Buffer
	var warns []string
	b := New(Options{DataDir: t.TempDir(), Warn: func(s string) { warns = append(warns, s) }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	res, err := b.Run(ctx, spec, sandbox.Stdio{Stdin: stdin, Stdout: &out, Stderr: &errb})
	o := outcome{res: res, err: err, stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
	if len(warns) > 0 {
		t.Logf("warnings: %v", warns)
	}
	return o
}

// mustRun runs and fails the test on a setup error or unexpected code.
func mustRun(t testing.TB, spec *sandbox.Spec, wantCode int) outcome {
	t.Helper()
	o := runSpec(t, spec, nil)
	if o.err != nil {
		t.Fatalf("%q: %v (stderr %q)", spec.Args, o.err, o.stderr)
	}
	if o.res.ExitCode != wantCode {
		t.Fatalf("%q: exit %d, want %d; stdout %q stderr %q", spec.Args, o.res.ExitCode, wantCode, o.stdout, o.stderr)
	}
	return o
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root (the rootless path is covered by TestRootless)")
	}
}

// sandboxProcs lists sandbox inits and exec stages started by this test
// binary (directly or through a helper), or orphaned: other engineers'
// sandboxes on the same machine are not ours to count.
func sandboxProcs() []string {
	self, _ := os.Readlink("/proc/self/exe")
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		// Inits and exec stages only: a persistent sandbox's waiting
		// supervisor (argv0Wait, a child of pid 1 once its starter has
		// gone) belongs to whoever started that sandbox.
		if err != nil || !bytes.HasPrefix(b, []byte(argv0Init)) && !bytes.HasPrefix(b, []byte(argv0Exec)) {
			continue
		}
		st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
		if len(f) < 2 {
			continue
		}
		ppid := f[1]
		pexe, _ := os.Readlink("/proc/" + ppid + "/exe")
		if ppid == "1" || pexe == self || strings.HasPrefix(pexe, "/tmp/ak-rootless-") {
			out = append(out, e.Name()+":"+string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		}
	}
	return out
}

// agentkernelCgroups lists agentkernel-* cgroup directories.
func agentkernelCgroups() []string {
	var out []string
	for _, p := range cgroupParents() {
		ents, _ := os.ReadDir(p)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), cgroupPrefix) {
				out = append(out, filepath.Join(p, e.Name()))
			}
		}
	}
	return out
}

func mountTable(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	// Drop the mount ids, which change with unrelated activity.
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 {
			lines = append(lines, strings.Join(f[3:], " "))
		}
	}
	return strings.Join(lines, "\n")
}

// waitGone polls until f returns nothing or the deadline passes.
func waitGone(f func() []string, d time.Duration) []string {
	deadline := time.Now().Add(d)
	for {
		left := f()
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func imageHost() image.Rootfs { return image.Rootfs{Ref: "host", Host: true} }

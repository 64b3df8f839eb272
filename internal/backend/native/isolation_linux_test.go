package native

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/backend/native/idrange"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestUserNamespace checks root inside is uid 0 of a namespace that maps
// it to the first id of a block of its own (idrange), both from inside
// and from the host's /proc.
func TestUserNamespace(t *testing.T) {
	requireRoot(t)
	o := mustRun(t, newSpec("sh", "-c", "id -u; cat /proc/self/uid_map /proc/self/gid_map"), 0)
	f := strings.Fields(o.stdout)
	if len(f) != 7 || f[0] != "0" || f[1] != "0" || f[3] != "65536" || f[4] != "0" || f[6] != "65536" {
		t.Fatalf("id/uid_map/gid_map: %q", o.stdout)
	}
	if base, err := strconv.Atoi(f[2]); err != nil || base < idrange.First || base+idrange.Size > idrange.End || (base-idrange.First)%idrange.Size != 0 || f[5] != f[2] {
		t.Fatalf("root maps to host %s:%s, not a block of systemd's container range", f[2], f[5])
	}

	// From the host: find the sandboxed sleep and read its credentials.
	marker := strconv.Itoa(4000 + os.Getpid()%1000)
	spec := newSpec("sleep", marker)
	done := make(chan outcome, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		b := New(Options{DataDir: t.TempDir()})
		res, err := b.Run(ctx, spec, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard})
		done <- outcome{res: res, err: err}
	}()
	var status, base string
	for deadline := time.Now().Add(5 * time.Second); status == "" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			cl, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err == nil && string(cl) == "sleep\x00"+marker+"\x00" {
				st, _ := os.ReadFile("/proc/" + e.Name() + "/status")
				status = string(st)
				m, _ := os.ReadFile("/proc/" + e.Name() + "/uid_map")
				if f := strings.Fields(string(m)); len(f) == 3 {
					base = f[1]
				}
			}
		}
	}
	cancel()
	o = <-done
	if !o.res.TimedOut {
		t.Errorf("cancelled run: %+v %v", o.res, o.err)
	}
	if status == "" {
		t.Fatal("sandboxed process not found from the host")
	}
	for _, l := range strings.Split(status, "\n") {
		if strings.HasPrefix(l, "Uid:") || strings.HasPrefix(l, "Gid:") {
			if f := strings.Fields(l); f[1] != base || f[2] != base {
				t.Errorf("host view %q, want %s (its uid_map)", l, base)
			}
		}
		if strings.HasPrefix(l, "NoNewPrivs:") && !strings.HasSuffix(l, "1") {
			t.Errorf("%q", l)
		}
		if strings.HasPrefix(l, "Seccomp:") && !strings.HasSuffix(l, "2") {
			t.Errorf("%q", l)
		}
	}
}

// TestKernelInterfaces: /proc/sys is read-only, core_pattern cannot be
// written, masked files are empty, mounting and renaming the host fail.
func TestKernelInterfaces(t *testing.T) {
	before, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	script := `
echo '|/bin/evil' > /proc/sys/kernel/core_pattern && echo WROTE-CORE
echo 1 > /proc/sys/kernel/sysrq && echo WROTE-SYSRQ
echo 1 > /proc/sysrq-trigger && echo WROTE-TRIGGER
grep -q ' /proc/sys .*\bro\b' /proc/self/mounts && echo PROCSYS-RO
[ -s /proc/kcore ] && echo KCORE-VISIBLE
[ -z "$(cat /proc/keys)" ] && echo KEYS-EMPTY
mount -t tmpfs none /mnt 2>/dev/null && echo MOUNTED
hostname evil 2>/dev/null && echo RENAMED
echo x > /sys/kernel/uevent_helper 2>/dev/null && echo SYSFS-WRITE
unshare -m true 2>/dev/null && echo UNSHARED
ls /sys/class/net
hostname
true`
	o := mustRun(t, newSpec("sh", "-c", script), 0)
	for _, bad := range []string{"WROTE-CORE", "WROTE-SYSRQ", "WROTE-TRIGGER", "KCORE-VISIBLE", "MOUNTED", "RENAMED", "SYSFS-WRITE", "UNSHARED"} {
		if strings.Contains(o.stdout, bad) {
			t.Errorf("%s: %s", bad, o.stdout)
		}
	}
	for _, good := range []string{"PROCSYS-RO", "KEYS-EMPTY", "sbx"} {
		if !strings.Contains(o.stdout, good) {
			t.Errorf("missing %s: %s", good, o.stdout)
		}
	}
	if nets := strings.Fields(strings.TrimSuffix(strings.Split(o.stdout, "sbx")[0], "\n")); len(nets) == 0 || nets[len(nets)-1] != "lo" {
		t.Errorf("network interfaces: %q", o.stdout)
	}
	after, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	if !bytes.Equal(before, after) {
		t.Fatalf("host core_pattern changed: %q -> %q", before, after)
	}
	// Loopback is up.
	mustRun(t, newSpec("sh", "-c", "ip link show lo | grep -q UP"), 0)
}

func TestCapabilities(t *testing.T) {
	spec := newSpec("sh", "-c", "grep ^Cap /proc/self/status")
	spec.Security.Capabilities = []string{"CAP_CHOWN", "CAP_KILL"}
	o := mustRun(t, spec, 0)
	want := map[string]string{"CapInh": "0000000000000000", "CapPrm": "0000000000000021", "CapEff": "0000000000000021", "CapBnd": "0000000000000021", "CapAmb": "0000000000000000"}
	for _, l := range strings.Split(strings.TrimSpace(o.stdout), "\n") {
		f := strings.Fields(l)
		if w := want[strings.TrimSuffix(f[0], ":")]; w != f[1] {
			t.Errorf("%s, want %s", l, w)
		}
	}
	// A non-root user gets nothing.
	spec.User = "app"
	o = mustRun(t, spec, 0)
	if !strings.Contains(o.stdout, "CapEff:\t0000000000000000") {
		t.Errorf("app user caps: %s", o.stdout)
	}
}

func TestEnvWorkdirUser(t *testing.T) {
	spec := newSpec("sh", "-c", `echo "$FOO $BAR $PATH $HOME"; pwd; id`)
	spec.Rootfs.Config.Env = []string{"FOO=image", "BAR=image"}
	spec.Env = []string{"BAR=spec"}
	spec.Workdir = "/work/deep"
	spec.User = "app"
	o := mustRun(t, spec, 0)
	lines := strings.Split(o.stdout, "\n")
	if lines[0] != "image spec /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /home/app" {
		t.Errorf("env: %q", lines[0])
	}
	if lines[1] != "/work/deep" {
		t.Errorf("pwd: %q", lines[1])
	}
	if !strings.HasPrefix(lines[2], "uid=1000(app) gid=1000(app) groups=") || !strings.Contains(lines[2], "10(wheel)") {
		t.Errorf("id: %q", lines[2])
	}
	spec.User = "1000:10"
	spec.Workdir = ""
	spec.Rootfs.Config.WorkingDir = "/home/app"
	o = mustRun(t, spec, 0)
	if l := strings.Split(o.stdout, "\n"); l[1] != "/home/app" || !strings.HasPrefix(l[2], "uid=1000(app) gid=10(wheel)") {
		t.Errorf("numeric user: %q", o.stdout)
	}
	// The app user can write its workdir, which we created for it.
	spec = newSpec("sh", "-c", "touch x && ls -ln x")
	spec.User, spec.Workdir = "app", "/made/for/app"
	mustRun(t, spec, 0)
	// Image entrypoint + cmd when no args.
	spec = newSpec()
	spec.Rootfs.Config.Entrypoint = []string{"echo"}
	spec.Rootfs.Config.Cmd = []string{"from", "image"}
	if o := mustRun(t, spec, 0); o.stdout != "from image\n" {
		t.Errorf("entrypoint: %q", o.stdout)
	}
	spec.User = "nosuchuser"
	if o := runSpec(t, spec, nil); o.err == nil || !strings.Contains(o.err.Error(), "nosuchuser") {
		t.Errorf("unknown user: %v", o.err)
	}
}

func TestReadOnlyRoot(t *testing.T) {
	spec := newSpec("sh", "-c", "touch /etc/x 2>/dev/null && echo WROTE; touch /tmp/ok /run/ok /dev/shm/ok && echo TMP-OK")
	spec.ReadOnlyRoot = true
	o := mustRun(t, spec, 0)
	if o.stdout != "TMP-OK\n" {
		t.Fatalf("%q %q", o.stdout, o.stderr)
	}
	spec.ReadOnlyRoot = false
	o = mustRun(t, spec, 0)
	if o.stdout != "WROTE\nTMP-OK\n" {
		t.Fatalf("writable root: %q %q", o.stdout, o.stderr)
	}
}

// TestWorkspaceMounts covers copy-on-write (host unchanged), rw binds
// (writes reach the host, no setuid files), ro binds and tmpfs.
func TestWorkspaceMounts(t *testing.T) {
	host := t.TempDir()
	if err := os.Chmod(host, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "file"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	spec := newSpec("sh", "-c", "cat file; echo sandbox > file; echo new > new; mkdir d; rm -f file2; cat file; stat -c '%u %g' /workspace/file")
	spec.Workdir = "/workspace"
	spec.Mounts = []sandbox.Mount{{Kind: sandbox.MountCopyOnWrite, Source: host, Dest: "/workspace"}}
	o := mustRun(t, spec, 0)
	if !strings.HasPrefix(o.stdout, "host\nsandbox\n") {
		t.Fatalf("cow: %q %q", o.stdout, o.stderr)
	}
	if os.Getuid() == 0 && !strings.HasSuffix(o.stdout, "\n0 0\n") {
		t.Errorf("cow: host root's file should look root-owned inside: %q", o.stdout)
	}
	if b, _ := os.ReadFile(filepath.Join(host, "file")); string(b) != "host\n" {
		t.Errorf("cow leaked to host: %q", b)
	}
	if _, err := os.Stat(filepath.Join(host, "new")); err == nil {
		t.Error("cow: new file reached the host")
	}

	spec = newSpec("sh", "-c", "echo through > rw; chmod 4755 rw && echo SETUID; chmod 755 rw && echo CHMOD-OK; cat /ro/file; echo x > /ro/y || echo RO-OK; echo t > /scratch/t && echo TMPFS-OK")
	spec.Workdir = "/workspace"
	spec.Mounts = []sandbox.Mount{
		{Kind: sandbox.MountBind, Source: host, Dest: "/workspace"},
		{Kind: sandbox.MountBind, Source: host, Dest: "/ro", ReadOnly: true},
		{Kind: sandbox.MountTmpfs, Dest: "/scratch"},
	}
	o = mustRun(t, spec, 0)
	if strings.Contains(o.stdout, "SETUID") || !strings.Contains(o.stdout, "CHMOD-OK") || !strings.Contains(o.stdout, "RO-OK") || !strings.Contains(o.stdout, "TMPFS-OK") || !strings.Contains(o.stdout, "host\n") {
		t.Errorf("binds: %q %q", o.stdout, o.stderr)
	}
	fi, err := os.Stat(filepath.Join(host, "rw"))
	if err != nil {
		t.Fatalf("rw bind did not write through: %v", err)
	}
	if fi.Mode()&os.ModeSetuid != 0 {
		t.Error("setuid file created on the host")
	}
}

func TestBackgroundChildrenDoNotHold(t *testing.T) {
	start := time.Now()
	o := mustRun(t, newSpec("sh", "-c", "sleep 100 & sleep 100 & exit 3"), 3)
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %v", d)
	}
	_ = o
	if left := waitGone(sandboxProcs, 2*time.Second); len(left) > 0 {
		t.Fatalf("left: %v", left)
	}
}

func TestTimeout(t *testing.T) {
	spec := newSpec("sh", "-c", "trap '' TERM INT; sleep 30")
	spec.Resources.Timeout = 300 * time.Millisecond
	o := runSpec(t, spec, nil)
	if o.err != nil || !o.res.TimedOut {
		t.Fatalf("%+v %v", o.res, o.err)
	}
	if o.elapsed > 3*time.Second {
		t.Fatalf("took %v", o.elapsed)
	}
	if left := waitGone(sandboxProcs, 2*time.Second); len(left) > 0 {
		t.Fatalf("left: %v", left)
	}
}

func TestHostImage(t *testing.T) {
	spec := newSpec("sh", "-c", "cat /etc/shadow | wc -c; ls /etc/ssh 2>/dev/null | wc -l; test -x /usr/bin/env && echo HAS-USR; touch /usr/x 2>/dev/null && echo WROTE-USR; id -u")
	spec.Rootfs = imageHost()
	o := mustRun(t, spec, 0)
	f := strings.Fields(o.stdout)
	if len(f) < 4 || f[0] != "0" || f[1] != "0" || f[2] != "HAS-USR" || strings.Contains(o.stdout, "WROTE-USR") {
		t.Fatalf("host image: %q %q", o.stdout, o.stderr)
	}
}

// TestNetworkEgress: with egress, the sandbox gets eth0 and a resolv.conf
// naming its resolver, on every executor (thread, re-executed init,
// prepared); the cloud metadata endpoint is refused at once, and the run's
// result says so. The network helper is this test binary (TestMain).
func TestNetworkEgress(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const script = "grep -c 10.0.2.3 /etc/resolv.conf; grep -c eth0: /proc/net/dev; " +
		"nc -w 5 169.254.169.254 80 </dev/null 2>/dev/null; echo nc=$?"
	for _, ex := range []string{"thread", "reexec", "prepared"} {
		t.Run(ex, func(t *testing.T) {
			if ex == "reexec" {
				t.Setenv("AGENTKERNEL_REEXEC_INIT", "1")
			}
			spec := newSpec("sh", "-c", script)
			spec.Network = sandbox.Network{Mode: sandbox.NetworkFull}
			b := New(Options{DataDir: t.TempDir(), NetHelper: self})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			stdio := sandbox.Stdio{Stdout: &out, Stderr: &errb}
			start := time.Now()
			var res sandbox.Result
			if ex == "prepared" {
				p, err := b.Prepare(ctx, spec)
				if err != nil {
					t.Fatal(err)
				}
				res, err = p.Run(ctx, spec.Args, stdio, nil)
			} else {
				res, err = b.Run(ctx, spec, stdio)
			}
			if err != nil {
				t.Fatalf("%v (stderr %q)", err, errb.String())
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("the refused connection took %v: a refusal must be at once", took)
			}
			if got := out.String(); got != "1\n1\nnc=1\n" {
				t.Errorf("inside: %q, want resolv.conf, eth0 and a refused nc (stderr %q)", got, errb.String())
			}
			found := false
			for _, d := range res.NetworkDenials {
				found = found || d.Kind == "tcp" && strings.HasPrefix(d.Addr, "169.254.169.254")
			}
			if !found || !strings.Contains(res.NetworkSummary, "169.254.169.254") {
				t.Errorf("result: denials %+v, summary %q", res.NetworkDenials, res.NetworkSummary)
			}
		})
	}
	// No egress: loopback only, and no helper.
	o := mustRun(t, newSpec("sh", "-c", "grep -c eth0: /proc/net/dev"), 1)
	if o.stdout != "0\n" {
		t.Errorf("network none: %q", o.stdout)
	}
}

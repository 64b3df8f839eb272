//go:build linux

package e2e

import (
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/agentkernel/agentkernel/internal/testenv/netlab"
)

// TestGVisorPersistent: a persistent sandbox on the gvisor backend
// (sandbox create -B gvisor): commands through exec, files both ways
// through cp, stats, stop and start with the writable layer kept, and
// remove leaving nothing behind.
func TestGVisorPersistent(t *testing.T) {
	a, ref := withGVisor(t)
	a.must("sandbox", "create", "gv", "-B", "gvisor", "--image", ref, "--network", "none", "--start")
	removed := false
	defer func() {
		if !removed {
			a.run("sandbox", "rm", "-f", "gv")
		}
	}()
	r := a.must("exec", "gv", "--", "sh", "-c", "cat /proc/version; echo made > /kept.txt; hostname")
	if !strings.Contains(r.stdout, "gvisor") {
		t.Errorf("not under gVisor's kernel: %v", r)
	}
	if r := a.run("exec", "gv", "--", "sh", "-c", "exit 7"); r.code != 7 {
		t.Errorf("exit status: %v", r)
	}
	if r := a.run("exec", "gv", "--", "no-such-command"); r.code != 127 {
		t.Errorf("a missing command: %v", r)
	}
	// cp, both ways.
	src := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(src, []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.must("cp", src, "gv:/in.txt")
	if r := a.must("exec", "gv", "--", "cat", "/in.txt"); r.stdout != "from the host\n" {
		t.Errorf("cp in: %v", r)
	}
	out := filepath.Join(t.TempDir(), "kept.txt")
	a.must("cp", "gv:/kept.txt", out)
	if b, _ := os.ReadFile(out); string(b) != "made\n" {
		t.Errorf("cp out: %q", b)
	}
	// Attack: links made inside never lead cp to the host's files.
	// (cp refuses a link as the last component; through a directory's
	// link it resolves inside the sandbox's root.)
	a.must("exec", "gv", "--", "sh", "-c", "ln -s ../../../../../../../etc /upetc; ln -s /../../../../../tmp /uptmp; ln -s /proc/1/root /p1")
	up := filepath.Join(t.TempDir(), "up")
	if r := a.run("cp", "gv:/upetc/passwd", up); r.code == 0 {
		if b, _ := os.ReadFile(up); !strings.Contains(string(b), "app:x:1000") {
			t.Errorf("cp out through a link read something else than the image's /etc/passwd: %q", b)
		}
	}
	marker := "gvisor-cp-escape-" + filepath.Base(t.TempDir())
	r = a.run("cp", src, "gv:/uptmp/"+marker)
	if _, err := os.Stat("/tmp/" + marker); err == nil {
		os.Remove("/tmp/" + marker)
		t.Error("cp in through a link wrote to the host's /tmp")
	}
	if r.code == 0 {
		if r := a.run("exec", "gv", "--", "cat", "/tmp/"+marker); r.stdout != "from the host\n" {
			t.Errorf("cp in through a link: not inside the sandbox: %v", r)
		}
	}
	t.Logf("cp in through a link: %v", r)
	// cp into /tmp itself, and back.
	a.must("cp", src, "gv:/tmp/plain.txt")
	if r := a.must("exec", "gv", "--", "cat", "/tmp/plain.txt"); r.stdout != "from the host\n" {
		t.Errorf("cp into /tmp: %v", r)
	}
	if r := a.run("cp", "gv:/p1/etc/hostname", filepath.Join(t.TempDir(), "h")); r.code == 0 {
		if b, _ := os.ReadFile(filepath.Join(filepath.Dir(up), "h")); len(b) > 0 {
			h, _ := os.ReadFile("/etc/hostname")
			if string(b) == string(h) {
				t.Errorf("cp out through /proc/1/root read the host's /etc/hostname")
			}
		}
	}
	if r := a.must("stats", "gv"); !strings.Contains(r.stdout, "gv") {
		t.Errorf("stats: %v", r)
	}
	a.must("sandbox", "stop", "gv")
	a.must("sandbox", "start", "gv")
	if r := a.must("exec", "gv", "--", "cat", "/kept.txt", "/in.txt"); r.stdout != "made\nfrom the host\n" {
		t.Errorf("after stop and start: %v", r)
	}
	a.must("sandbox", "rm", "-f", "gv")
	removed = true
}

// TestGVisorPersistentNetwork: a persistent gvisor sandbox's network is
// a run's: an allowed name reached, another refused, a published port
// reachable from the host's loopback while it runs.
func TestGVisorPersistentNetwork(t *testing.T) {
	a, ref, lab := gvNetEnv(t)
	a.must(append([]string{"sandbox", "create", "gvnet", "-B", "gvisor", "--image", ref, "--pull", "never", "-P", "18081:8000", "--start"}, filtered...)...)
	defer a.run("sandbox", "rm", "-f", "gvnet")
	if r := a.must("exec", "gvnet", "--", "wget", "-q", "-O", "-", "http://allowed.test/"); !strings.Contains(r.stdout, "netlab web host=allowed.test") {
		t.Errorf("allowed name: %v", r)
	}
	if r := a.run("exec", "gvnet", "--", "wget", "-q", "-O", "-", "http://"+netlab.Web4(2)+"/"); r.code == 0 || lab.Reached(netlab.Web4(2)) {
		t.Errorf("an address filtered mode does not allow was reached: %v", r)
	}
	a.must("exec", "-d", "gvnet", "--", "sh", "-c", "mkdir -p /srv && echo persistent > /srv/p.txt && exec httpd -f -p 8000 -h /srv")
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: lab.DialContext}}
	body := ""
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if resp, err := client.Get("http://127.0.0.1:18081/p.txt"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if body = string(b); resp.StatusCode == http.StatusOK {
				break
			}
		}
	}
	if body != "persistent\n" {
		t.Errorf("published port: %q", body)
	}
}

// TestGVisorSnapshotStopped: a stopped gvisor sandbox's files are
// snapshotted and restored into a new gvisor sandbox.
func TestGVisorSnapshotStopped(t *testing.T) {
	a, ref := withGVisor(t)
	a.must("sandbox", "create", "gs", "-B", "gvisor", "--image", ref, "--network", "none", "--start")
	defer a.run("sandbox", "rm", "-f", "gs")
	defer a.run("sandbox", "rm", "-f", "gs2")
	a.must("exec", "gs", "--", "sh", "-c", "echo snap > /root/s.txt")
	a.must("sandbox", "stop", "gs")
	a.must("snapshot", "take", "gs", "--name", "stopped")
	a.must("snapshot", "restore", "stopped", "--as", "gs2")
	if r := a.must("sandbox", "list", "--all"); !strings.Contains(r.stdout, "gs2") {
		t.Fatalf("list: %v", r)
	}
	a.must("sandbox", "start", "gs2")
	if r := a.must("exec", "gs2", "--", "sh", "-c", "cat /root/s.txt; cat /proc/version"); !strings.HasPrefix(r.stdout, "snap\n") || !strings.Contains(r.stdout, "gvisor") {
		t.Errorf("the restored sandbox: %v", r)
	}
}

// TestGVisorAuto: the backend name "auto" picks for each sandbox where
// runsc works and we are root: a persistent sandbox created with -B auto
// runs under gVisor's kernel (and says so at info level), and a server
// whose [sandbox] backend is auto runs an API request there too, while a
// request naming native still gets native.
func TestGVisorAuto(t *testing.T) {
	a, ref := withGVisor(t)
	r := a.must("--log-level", "info", "sandbox", "create", "ga", "-B", "auto", "--image", ref, "--network", "none", "--start")
	defer a.run("sandbox", "rm", "-f", "ga")
	if !strings.Contains(r.stderr, "backend auto: gvisor") {
		t.Errorf("the choice is not said: %v", r)
	}
	if r := a.must("exec", "ga", "--", "cat", "/proc/version"); !strings.Contains(r.stdout, "gvisor") {
		t.Errorf("-B auto sandbox not under gVisor: %v", r)
	}
	if r := a.must("sandbox", "list"); !strings.Contains(r.stdout, "gvisor") {
		t.Errorf("sandbox list does not say gvisor: %v", r)
	}
	a.must("sandbox", "rm", "-f", "ga")

	// A receipt records the backend that ran, not "auto".
	rcpt := filepath.Join(t.TempDir(), "run.receipt.json")
	a.must("run", "-B", "auto", "--receipt", rcpt, "--image", ref, "--", "true")
	if b, err := os.ReadFile(rcpt); err != nil || !strings.Contains(string(b), "gvisor") || strings.Contains(string(b), `"auto"`) {
		t.Errorf("receipt of a -B auto run: %s (%v), want backend gvisor", b, err)
	}

	cfg := filepath.Join(t.TempDir(), "server.toml")
	if err := os.WriteFile(cfg, []byte("[sandbox]\nbackend = \"auto\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, a, "listening on ", "--config", cfg, "serve", "--port", "0", "--api-key", apiKey)
	s.url = strings.TrimSpace(s.url)
	for _, c := range []struct{ backend, want, not string }{
		{"", "gvisor", ""},
		{`,"backend":"auto"`, "gvisor", ""},
		{`,"backend":"native"`, "Linux version", "gvisor"},
	} {
		body := `{"command":["cat","/proc/version"],"image":"` + ref + `","fast":false` + c.backend + `}`
		resp := s.raw("POST", "/run", body)
		out := string(resp.body)
		if resp.status != 200 || !strings.Contains(out, c.want) || (c.not != "" && strings.Contains(out, c.not)) {
			t.Errorf("POST /run %s: %d %s, want %s", body, resp.status, out, c.want)
		}
	}
}

// TestGVisorSnapshotRunning: a running gvisor sandbox's snapshot is
// taken while runsc holds it paused, as native's is while the cgroup
// freezer holds it: a file a background command rewrites all the while
// is restored whole, the sandbox runs on after the take (not left
// paused), and the snapshot restores into a new name, also once the
// source is removed.
func TestGVisorSnapshotRunning(t *testing.T) {
	a, ref := withGVisor(t)
	a.must("sandbox", "create", "gr", "-B", "gvisor", "--image", ref, "--network", "none", "--start")
	defer a.run("sandbox", "rm", "-f", "gr")
	defer a.run("sandbox", "rm", "-f", "gr2")
	defer a.run("sandbox", "rm", "-f", "gr3")
	a.must("exec", "gr", "--", "sh", "-c", "echo snap > /root/s.txt")
	// A writer that never stops: each line of /root/count is whole
	// when it is read (the file is rewritten through a rename).
	a.must("exec", "-d", "gr", "--", "sh", "-c", "i=0; while :; do i=$((i+1)); seq 1 $i > /root/c.tmp; mv /root/c.tmp /root/count; done")
	time.Sleep(500 * time.Millisecond)
	a.must("snapshot", "take", "gr", "--name", "live")
	// Running on: the counter still moves, exec still answers.
	first := a.must("exec", "gr", "--", "sh", "-c", "wc -l < /root/count").stdout
	time.Sleep(300 * time.Millisecond)
	if second := a.must("exec", "gr", "--", "sh", "-c", "wc -l < /root/count").stdout; first == second {
		t.Errorf("the sandbox does not run on after the take: %q then %q", first, second)
	}
	a.must("snapshot", "restore", "live", "--as", "gr2")
	a.must("sandbox", "start", "gr2")
	check := func(name string) {
		t.Helper()
		r := a.must("exec", name, "--", "sh", "-c", "cat /root/s.txt; n=$(wc -l < /root/count); test \"$(tail -n 1 /root/count)\" = \"$n\" && echo whole $n; cat /proc/version")
		if !strings.HasPrefix(r.stdout, "snap\nwhole ") || !strings.Contains(r.stdout, "gvisor") {
			t.Errorf("%s, restored from a running sandbox's snapshot: %v", name, r)
		}
	}
	check("gr2")
	a.must("sandbox", "rm", "-f", "gr")
	a.must("snapshot", "restore", "live", "--as", "gr3")
	a.must("sandbox", "start", "gr3")
	check("gr3")
}

// TestGVisorExecTTYResize: exec -t in a persistent gvisor sandbox gives
// the command a terminal of the caller's size, and a resize of the
// caller's window reaches it: the new size, and SIGWINCH; exec ends with
// the command.
func TestGVisorExecTTYResize(t *testing.T) {
	a, ref := withGVisor(t)
	a.must("sandbox", "create", "gt", "-B", "gvisor", "--image", ref, "--network", "none", "--start")
	defer a.run("sandbox", "rm", "-f", "gt")
	c, master, r := ptyRun(t, a, 24, 80, "exec", "-it", "gt", "--", "sh", "-c",
		"trap 'echo winch-$(stty size | tr \" \" x)' WINCH; echo size-$(stty size | tr ' ' x); while read x; [ \"$x\" != q ]; do :; done; exit 4")
	expect(t, r, "size-24x80")
	if err := pty.Setsize(master, &pty.Winsize{Rows: 50, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	expect(t, r, "winch-50x132")
	if err := pty.Setsize(master, &pty.Winsize{Rows: 33, Cols: 101}); err != nil {
		t.Fatal(err)
	}
	expect(t, r, "winch-33x101")
	master.Write([]byte("q\r"))
	// The command's end ends exec at once: the caller's terminal is
	// not held open by the sandbox's side.
	go func() { _, _ = io.Copy(io.Discard, r) }()
	if code := exitCode(t, c); code != 4 {
		t.Errorf("exec -t's exit status: %d", code)
	}
}

// TestGVisorSupervisorKilled: a persistent gvisor sandbox whose
// supervisor was killed (kill -9, runsc with it) and that is removed
// without booting again leaves none of runsc's cgroups behind.
func TestGVisorSupervisorKilled(t *testing.T) {
	a, ref := withGVisor(t)
	a.must("sandbox", "create", "gvk", "-B", "gvisor", "--image", ref, "--network", "none", "--start")
	defer a.run("sandbox", "rm", "-f", "gvk")
	var spec struct {
		ID string `json:"id"`
	}
	b, err := os.ReadFile(filepath.Join(a.dataDir, "sandboxes", "gvk", "spec.json"))
	if err != nil || json.Unmarshal(b, &spec) != nil || spec.ID == "" {
		t.Fatalf("spec.json: %v %s", err, b)
	}
	name := "agentkernel-gvisor-agentkernel-" + spec.ID
	cgroups := func() []string {
		var found []string
		_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if d.Name() == name {
				found = append(found, p)
				return filepath.SkipDir
			}
			return nil
		})
		return found
	}
	if len(cgroups()) == 0 {
		t.Fatalf("no cgroup %s while the sandbox runs: the check below would prove nothing", name)
	}
	sup := a.info("gvk").SupervisorPID
	if sup <= 0 {
		t.Fatal("no supervisor pid")
	}
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(sup, 0) == nil && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	// runsc's processes end with the supervisor, a moment after it.
	procsLeft := func() bool {
		for _, l := range gvisorLeftovers(a) {
			if strings.HasPrefix(l, "process: ") {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(10 * time.Second); procsLeft() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if i := a.info("gvk"); i.Status != "stopped" {
		t.Fatalf("after kill -9: %+v", i)
	}
	a.must("sandbox", "rm", "-f", "gvk")
	if left := cgroups(); len(left) > 0 {
		t.Errorf("cgroups left after the removal: %v", left)
	}
}

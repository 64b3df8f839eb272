//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ttlInfo is the part of `sandbox info --json` about expiry.
type ttlInfo struct {
	Name      string     `json:"name"`
	Status    string     `json:"status"`
	ExpiresAt *time.Time `json:"expires_at"`
}

func (a *ak) ttlInfo(name string) ttlInfo {
	a.t.Helper()
	var i ttlInfo
	r := a.must("sandbox", "info", "--json", name)
	if err := json.Unmarshal([]byte(r.stdout), &i); err != nil {
		a.t.Fatalf("info: %v\n%s", err, r.stdout)
	}
	return i
}

// waitGone waits until pid has exited (or is a zombie).
func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(b), ") Z ") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("pid %d still runs after %v", pid, within)
}

// TestPersistentNothingLost: what a persistent sandbox writes to its root
// and to the copy-on-write view of the project (/workspace, profile
// moderate) survives stop and start and a supervisor killed with
// SIGKILL, on disk under the sandbox's directory; the project itself
// never changes; /tmp is memory; rm removes all of it.
func TestPersistentNothingLost(t *testing.T) {
	a, ref := withRegistry(t)
	if err := os.WriteFile(filepath.Join(a.dir, "orig.txt"), []byte("orig\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.must("sandbox", "create", "keep", "--image", ref, "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "keep") })
	a.must("exec", "keep", "--", "sh", "-c", "echo w > /workspace/x && echo changed > /workspace/orig.txt && mkdir -p /root && echo r > /root/y && echo t > /tmp/z")
	const check = "cat /workspace/x /workspace/orig.txt /root/y; cat /tmp/z 2>/dev/null || echo no-tmp"
	const want = "w\nchanged\nr\nno-tmp\n"

	a.must("sandbox", "stop", "keep")
	a.must("sandbox", "start", "keep")
	if r := a.must("exec", "keep", "--", "sh", "-c", check); r.stdout != want {
		t.Errorf("after stop and start: %v", r)
	}
	// On disk, under the sandbox's directory.
	dir := filepath.Join(a.dataDir, "sandboxes", "keep")
	if b, err := os.ReadFile(filepath.Join(dir, "cow0", "upper", "x")); err != nil || string(b) != "w\n" {
		t.Errorf("the copy-on-write layer is not kept in cow0/upper: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(a.dir, "x")); err == nil {
		t.Errorf("a write to /workspace reached the project directory")
	}
	if b, _ := os.ReadFile(filepath.Join(a.dir, "orig.txt")); string(b) != "orig\n" {
		t.Errorf("the project's file changed: %q", b)
	}

	// The supervisor killed: nothing lost either.
	pid := a.info("keep").SupervisorPID
	if pid <= 0 {
		t.Fatalf("no supervisor pid")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid, 10*time.Second)
	if i := a.info("keep"); i.Status != "stopped" {
		t.Errorf("after kill -9 of the supervisor: %+v", i)
	}
	a.must("sandbox", "start", "keep")
	if r := a.must("exec", "keep", "--", "sh", "-c", check); r.stdout != want {
		t.Errorf("after the supervisor was killed: %v", r)
	}
	if r := a.must("stats", "keep", "--json"); !strings.Contains(r.stdout, "upper_bytes") {
		t.Errorf("stats: %v", r)
	}
	a.must("sandbox", "rm", "--force", "keep")
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("%s left after rm", dir)
	}
}

// TestPersistentTTLOnTime: a sandbox created with --ttl 3 is stopped and
// removed by its own supervisor on time, with nobody calling list or gc;
// the removal is audited.
func TestPersistentTTLOnTime(t *testing.T) {
	a, ref := withRegistry(t)
	a.must("sandbox", "create", "brief", "--image", ref, "--ttl", "3", "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "brief") })
	r := a.must("sandbox", "list")
	if !strings.Contains(r.stdout, "EXPIRES") || !regexp.MustCompile(`brief .* in [1-3]s `).MatchString(r.stdout) {
		t.Errorf("list shows no expiry: %v", r)
	}
	r = a.must("sandbox", "list", "--json")
	var list []ttlInfo
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0].ExpiresAt == nil {
		t.Fatalf("list --json: %v %v", err, r)
	}
	pid := a.info("brief").SupervisorPID
	dir := filepath.Join(a.dataDir, "sandboxes", "brief")
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := os.Stat(dir)
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "supervisor.log"))
			t.Fatalf("the expired sandbox is still there after 15 s; supervisor.log:\n%s", log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if took := time.Until(*list[0].ExpiresAt); took > 0 {
		t.Errorf("removed %v before its expiry", took)
	}
	waitGone(t, pid, 5*time.Second)
	if r := a.run("sandbox", "info", "brief"); r.code == 0 {
		t.Errorf("info of the expired sandbox: %v", r)
	}
	found := false
	for _, e := range a.audit("--sandbox", "brief") {
		if e.Action == "remove" && strings.Contains(e.Who, "supervisor") && e.Error == "" {
			found = true
		}
	}
	if !found {
		t.Errorf("no audited remove by the supervisor: %+v", a.audit("--sandbox", "brief"))
	}
}

// TestExtendTTLAndStoppedExpiry: extend-ttl leaves a sandbox without a
// TTL without one unless --by is given; durations take days; a stopped
// sandbox that has expired is gone at the next list.
func TestExtendTTLAndStoppedExpiry(t *testing.T) {
	a, ref := withRegistry(t)
	a.must("sandbox", "create", "forever", "--image", ref)
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "forever") })
	if r := a.must("sandbox", "extend-ttl", "forever"); strings.TrimSpace(r.stdout) != "never" {
		t.Errorf("extend-ttl without --by of a sandbox without TTL: %v", r)
	}
	if i := a.ttlInfo("forever"); i.ExpiresAt != nil {
		t.Errorf("extend-ttl without --by gave a TTL: %+v", i)
	}
	a.must("sandbox", "extend-ttl", "forever", "--by", "2d")
	i := a.ttlInfo("forever")
	if i.ExpiresAt == nil || time.Until(*i.ExpiresAt) < 47*time.Hour || time.Until(*i.ExpiresAt) > 49*time.Hour {
		t.Fatalf("extend-ttl --by 2d: %+v", i)
	}
	first := *i.ExpiresAt
	a.must("sandbox", "extend-ttl", "forever")
	if i := a.ttlInfo("forever"); i.ExpiresAt == nil || i.ExpiresAt.Sub(first) != time.Hour {
		t.Errorf("extend-ttl (1h) of a sandbox with a TTL: %+v, was %v", i, first)
	}
	if r := a.run("sandbox", "extend-ttl", "forever", "--by", "0"); r.code != 125 || !strings.Contains(r.stderr, "longer than zero") {
		t.Errorf("--by 0: %v", r)
	}
	if r := a.run("sandbox", "create", "zero", "--image", ref, "--ttl", "0"); r.code != 125 {
		t.Errorf("--ttl 0: %v", r)
	}

	a.must("sandbox", "create", "short", "--image", ref, "--ttl", "1")
	time.Sleep(1500 * time.Millisecond)
	if r := a.must("sandbox", "list", "--all"); strings.Contains(r.stdout, "short") {
		t.Errorf("a stopped, expired sandbox is listed: %v", r)
	}
	if _, err := os.Stat(filepath.Join(a.dataDir, "sandboxes", "short")); err == nil {
		t.Errorf("its directory is left")
	}
	// start and gc remove an expired sandbox too; each removal is audited.
	a.must("sandbox", "create", "short2", "--image", ref, "--ttl", "1")
	a.must("sandbox", "create", "short3", "--image", ref, "--ttl", "1")
	time.Sleep(1500 * time.Millisecond)
	if r := a.run("sandbox", "start", "short2"); r.code == 0 || !strings.Contains(r.stderr, "expired") {
		t.Errorf("start of an expired sandbox: %v", r)
	}
	if r := a.must("sandbox", "gc"); !strings.Contains(r.stdout, "short3") {
		t.Errorf("gc of an expired sandbox: %v", r)
	}
	for _, n := range []string{"short", "short2", "short3"} {
		if !a.auditRemovedExpired(n) {
			b, _ := os.ReadFile(filepath.Join(a.dataDir, "audit.jsonl"))
			t.Errorf("no audited removal of expired sandbox %s:\n%s", n, b)
		}
	}
}

// auditRemovedExpired reports whether the audit log has the removal of
// sandbox name because it expired.
func (a *ak) auditRemovedExpired(name string) bool {
	b, _ := os.ReadFile(filepath.Join(a.dataDir, "audit.jsonl"))
	for _, line := range strings.Split(string(b), "\n") {
		var e struct{ Sandbox, Action, Details, Error string }
		if json.Unmarshal([]byte(line), &e) == nil && e.Sandbox == name && e.Action == "remove" &&
			strings.HasPrefix(e.Details, "expired at ") && e.Error == "" {
			return true
		}
	}
	return false
}

// TestRunKeep: run --keep leaves a persistent sandbox with a random name
// and a 1h expiry, named on stderr, that exec, list and rm work on.
func TestRunKeep(t *testing.T) {
	a, ref := withRegistry(t)
	r := a.run("run", "--keep", "--image", ref, "--", "sh", "-c", "mkdir -p /root && echo kept > /root/k; echo out; exit 3")
	if r.code != 3 || r.stdout != "out\n" {
		t.Fatalf("run --keep: %v", r)
	}
	m := regexp.MustCompile(`kept as sandbox (sandbox-[0-9a-f]{8}); agentkernel exec `).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("run --keep does not name the sandbox: %v", r)
	}
	name := m[1]
	t.Cleanup(func() { a.run("rm", "-f", name) })
	if r := a.must("exec", name, "--", "cat", "/root/k"); r.stdout != "kept\n" {
		t.Errorf("exec in the kept sandbox: %v", r)
	}
	i := a.ttlInfo(name)
	if i.Status != "running" || i.ExpiresAt == nil || time.Until(*i.ExpiresAt) > time.Hour || time.Until(*i.ExpiresAt) < 58*time.Minute {
		t.Errorf("kept sandbox: %+v", i)
	}
	if r := a.must("sandbox", "list"); !strings.Contains(r.stdout, name) {
		t.Errorf("list: %v", r)
	}
	a.must("rm", "-f", name)
	if r := a.run("sandbox", "info", name); r.code == 0 {
		t.Errorf("info after rm: %v", r)
	}
	// --ttl and --name with --keep.
	r = a.run("run", "--keep", "--name", "kept2", "--ttl", "1d", "--image", ref, "--", "true")
	t.Cleanup(func() { a.run("rm", "-f", "kept2") })
	if r.code != 0 || !strings.Contains(r.stderr, "kept as sandbox kept2;") {
		t.Fatalf("run --keep --name --ttl: %v", r)
	}
	if i := a.ttlInfo("kept2"); i.ExpiresAt == nil || time.Until(*i.ExpiresAt) < 23*time.Hour {
		t.Errorf("--ttl 1d: %+v", i)
	}
}

// TestSandboxConfigFilesAndName: [sandbox] name names a sandbox created
// without one; [[files]] are copied in at each start, with their mode;
// a project's agentkernel.toml cannot have a file outside its directory
// copied in.
func TestSandboxConfigFilesAndName(t *testing.T) {
	a, ref := withRegistry(t)
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(a.dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("hello.txt", "one\n")
	write("agentkernel.toml", "[sandbox]\nname = \"fromcfg\"\n\n[[files]]\nsource = \"hello.txt\"\ndest = \"/etc/app/hello.txt\"\nmode = \"0600\"\n")
	r := a.must("sandbox", "create", "--image", ref, "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "fromcfg") })
	if strings.TrimSpace(r.stdout) != "fromcfg" {
		t.Fatalf("[sandbox] name: %v", r)
	}
	if r := a.must("exec", "fromcfg", "--", "sh", "-c", "cat /etc/app/hello.txt; stat -c %a /etc/app/hello.txt"); r.stdout != "one\n600\n" {
		t.Errorf("[[files]] at start: %v", r)
	}
	write("hello.txt", "two\n")
	a.must("sandbox", "restart", "fromcfg")
	if r := a.must("exec", "fromcfg", "--", "cat", "/etc/app/hello.txt"); r.stdout != "two\n" {
		t.Errorf("[[files]] at the next start: %v", r)
	}

	// run --keep's sandbox gets them too.
	r = a.run("run", "--keep", "--image", ref, "--", "cat", "/etc/app/hello.txt")
	if m := regexp.MustCompile(`kept as sandbox (\S+);`).FindStringSubmatch(r.stderr); m != nil {
		t.Cleanup(func() { a.run("rm", "-f", m[1]) })
	}
	if r.code != 0 || r.stdout != "two\n" {
		t.Errorf("[[files]] in run --keep's sandbox: %v", r)
	}

	// A project's file naming a host file outside the project.
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write("agentkernel.toml", "[[files]]\nsource = \""+secret+"\"\ndest = \"/stolen\"\n")
	if r := a.run("sandbox", "create", "thief", "--image", ref, "--start"); r.code == 0 || !strings.Contains(r.stderr, "outside") {
		a.run("sandbox", "rm", "--force", "thief")
		t.Errorf("a project's [[files]] outside the project: %v", r)
	}
	// Nor through a symlink in the project.
	if err := os.Symlink(secret, filepath.Join(a.dir, "link")); err != nil {
		t.Fatal(err)
	}
	write("agentkernel.toml", "[[files]]\nsource = \"link\"\ndest = \"/stolen\"\n")
	r = a.run("sandbox", "create", "thief2", "--image", ref, "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "thief2") })
	if r.code == 0 {
		if out := a.run("exec", "thief2", "--", "cat", "/stolen"); strings.Contains(out.stdout, "s3cret") {
			t.Errorf("a project's [[files]] symlink copied a host file in: %v", out)
		}
		t.Errorf("start with a [[files]] symlink out of the project succeeded: %v", r)
	} else if !strings.Contains(r.stderr, "escapes") {
		t.Errorf("start with a [[files]] symlink out of the project: %v", r)
	}
	// All or nothing: a sandbox that create --start made and could not
	// start is not left behind.
	if r := a.must("sandbox", "list", "--all"); strings.Contains(r.stdout, "thief") {
		t.Errorf("sandboxes whose start failed are left: %v", r)
	}
	if _, err := os.Stat(filepath.Join(a.dataDir, "sandboxes", "thief2")); err == nil {
		t.Errorf("the directory of a sandbox whose start failed is left")
	}
}

// TestRootlessNothingLost: as an unprivileged user, what a persistent
// sandbox writes to the copy-on-write view of the project is kept on disk
// across stop and start, and rm removes it.
func TestRootlessNothingLost(t *testing.T) {
	a, uid := rootlessAK(t)
	if err := os.WriteFile(filepath.Join(a.dir, "orig.txt"), []byte("orig\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The user's own file, as a project's would be.
	fi, err := os.Stat(a.dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(a.dir, "orig.txt"), uid, int(fi.Sys().(*syscall.Stat_t).Gid)); err != nil {
		t.Fatal(err)
	}
	a.must("sandbox", "create", "rlkeep", "--image", "host", "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "rlkeep") })
	a.must("exec", "rlkeep", "--", "sh", "-c", "mkdir /workspace/d && echo w > /workspace/d/x && echo changed > /workspace/orig.txt")
	dir := filepath.Join(a.dataDir, "sandboxes", "rlkeep")
	if _, err := os.Stat(filepath.Join(dir, "cow0", "upper", "d", "x")); err != nil {
		t.Errorf("not kept under the sandbox's directory: %v", err)
	}
	a.must("sandbox", "stop", "rlkeep")
	a.must("sandbox", "start", "rlkeep")
	if r := a.must("exec", "rlkeep", "--", "cat", "/workspace/d/x", "/workspace/orig.txt"); r.stdout != "w\nchanged\n" {
		t.Errorf("after stop and start: %v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(a.dir, "orig.txt")); string(b) != "orig\n" {
		t.Errorf("the project's file changed: %q", b)
	}
	a.must("sandbox", "rm", "--force", "rlkeep")
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("%s left after rm", dir)
	}
}

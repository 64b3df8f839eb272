//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/testenv/netlab"
)

// TestGVisorDetached: exec -d in a persistent gvisor sandbox (the
// command a container of the sandbox, not a runsc exec): --logs (by
// offset, stderr), --status, --list, ps from a foreground exec sees it
// and its child, --kill ends both, the audit log has its end.
func TestGVisorDetached(t *testing.T) {
	a, ref := withGVisor(t)
	a.must("sandbox", "create", "gd", "-B", "gvisor", "--image", ref, "--network", "none", "--start")
	defer a.run("sandbox", "rm", "-f", "gd")
	r := a.must("exec", "-d", "gd", "--", "sh", "-c", "echo one; echo err >&2; sleep 0.3; echo two; sleep 4141 & exec sleep 4242")
	if !detachedIDRE.MatchString(r.stdout) {
		t.Fatalf("exec -d printed %q", r.stdout)
	}
	id := strings.TrimSpace(r.stdout)
	a.mustSay("one\ntwo\n", "exec", "--logs", id, "gd")
	if r := a.must("exec", "--status", id, "gd"); r.stdout != "running\n" {
		t.Errorf("status: %v", r)
	}
	if !a.psHas("gd", "sleep 4242") || !a.psHas("gd", "sleep 4141") {
		t.Errorf("the detached command is not seen from the sandbox's execs")
	}
	if r := a.must("exec", "--logs", id, "--offset", "4", "gd"); r.stdout != "two\n" {
		t.Errorf("logs from 4: %v", r)
	}
	if r := a.must("exec", "--logs", id, "--stderr", "gd"); r.stdout != "err\n" {
		t.Errorf("stderr: %v", r)
	}
	r = a.must("exec", "--list", "--json", "gd")
	var list []struct {
		ID, Status string
		Pid        int
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0].ID != id || list[0].Status != "running" || list[0].Pid <= 1 {
		t.Errorf("list: %v (%v)", r, err)
	}
	r = a.must("exec", "--kill", id, "--json", "gd")
	var d struct {
		ID, Status, Reason string
		ExitCode           *int `json:"exit_code"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || d.ID != id || d.Status != "failed" || d.ExitCode == nil || *d.ExitCode != 137 || d.Reason != "killed" {
		t.Errorf("kill: %v (%v)", r, err)
	}
	a.waitGone("gd", "sleep 4242")
	a.waitGone("gd", "sleep 4141")
	if !a.auditHas("gd", "sleep 4242", "detached: id "+id) {
		t.Errorf("the detached command is not in the audit log")
	}
	// One that ends by itself: its status and exit code.
	id2 := strings.TrimSpace(a.must("exec", "-d", "gd", "--", "sh", "-c", "echo bye; exit 5").stdout)
	a.mustSay("failed (exit code 5)\n", "exec", "--status", id2, "gd")
	if r := a.must("exec", "--logs", id2, "gd"); r.stdout != "bye\n" {
		t.Errorf("logs of an ended command: %v", r)
	}
	// Stop with a detached command running, and start again: it ended
	// with the sandbox.
	id3 := strings.TrimSpace(a.must("exec", "-d", "gd", "--", "sleep", "4343").stdout)
	a.must("sandbox", "stop", "gd")
	a.must("sandbox", "start", "gd")
	if r := a.must("exec", "--status", id3, "gd"); !strings.HasPrefix(r.stdout, "failed") {
		t.Errorf("after a stop: %v", r)
	}
	if a.psHas("gd", "sleep 4343") {
		t.Errorf("a detached command outlived its sandbox's stop")
	}
}

// TestGVisorMemorySnapshot: snapshot take --memory of a running gvisor
// sandbox and a restore of it. A detached command holding a counter in
// a shell variable (in memory only) counts on, in the restored sandbox,
// from where it was at the take; a file in /tmp (the writable layer) and
// one in gVisor's own tmpfs /dev (memory only) are there; the source
// runs on; a foreground command is not restored; the restored command
// is listed as running and its output goes on after what it had
// written; the restored sandbox's next start boots afresh. Refusals:
// --memory on native, on a stopped sandbox, hostile names. Take and
// first-start times are logged (medians of three).
func TestGVisorMemorySnapshot(t *testing.T) {
	a, ref := withGVisor(t)
	a.must("sandbox", "create", "gm", "-B", "gvisor", "--image", ref, "--network", "none", "--start")
	defer a.run("sandbox", "rm", "-f", "gm")
	// The counter prints each value and keeps it nowhere but in i.
	id := strings.TrimSpace(a.must("exec", "-d", "gm", "--", "sh", "-c", "i=1000; while :; do i=$((i+1)); echo $i; sleep 0.1; done").stdout)
	a.must("exec", "gm", "--", "sh", "-c", "echo in-tmp > /tmp/kept")
	// /dev is a tmpfs of gVisor's own: its files are in memory only.
	a.must("exec", "gm", "--", "sh", "-c", "echo in-memory > /dev/kept")
	// A foreground command that runs through the take.
	fgCtx, fgStop := context.WithCancel(context.Background())
	defer fgStop()
	fg := a.cmd(fgCtx, "exec", "gm", "--", "sh", "-c", "sleep 4545")
	if err := fg.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { fgStop(); _ = fg.Wait() }()
	waitFor := func(name, what string) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !a.psHas(name, what); {
			if time.Now().After(deadline) {
				t.Fatalf("%q does not run in %s", what, name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("gm", "sleep 4545")
	last := func(name, id string) int {
		t.Helper()
		f := strings.Fields(a.must("exec", "--logs", id, name).stdout)
		if len(f) == 0 {
			return 0
		}
		n, _ := strconv.Atoi(f[len(f)-1])
		return n
	}
	for deadline := time.Now().Add(15 * time.Second); last("gm", id) < 1005; {
		if time.Now().After(deadline) {
			t.Fatalf("the counter does not count")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Refusals first: a clear line, exit 125.
	if r := a.run("snapshot", "take", "gm", "--name", "../x", "--memory"); r.code != 125 {
		t.Errorf("a hostile snapshot name: %v", r)
	}
	if r := a.run("snapshot", "take", "gm", "--name", "a/b", "--memory"); r.code != 125 {
		t.Errorf("a hostile snapshot name: %v", r)
	}
	a.must("sandbox", "create", "gmn", "--image", ref, "--network", "none", "--start")
	defer a.run("sandbox", "rm", "-f", "gmn")
	if r := a.run("snapshot", "take", "gmn", "--name", "nat", "--memory"); r.code != 125 || !strings.Contains(r.stderr, "no memory snapshots") {
		t.Errorf("--memory on native: %v", r)
	}
	a.must("sandbox", "stop", "gmn")
	a.must("sandbox", "create", "gms", "-B", "gvisor", "--image", ref, "--network", "none")
	defer a.run("sandbox", "rm", "-f", "gms")
	if r := a.run("snapshot", "take", "gms", "--name", "st", "--memory"); r.code != 125 || !strings.Contains(r.stderr, "not running") {
		t.Errorf("--memory on a stopped sandbox: %v", r)
	}
	if r := a.must("snapshot", "list", "--json"); strings.Contains(r.stdout, `"nat"`) || strings.Contains(r.stdout, `"st"`) {
		t.Errorf("a refused take left a snapshot: %v", r)
	}

	var takes []time.Duration
	var at int
	for i := 0; i < 3; i++ {
		name := "mem" + strconv.Itoa(i)
		start := time.Now()
		a.must("snapshot", "take", "gm", "--name", name, "--memory")
		takes = append(takes, time.Since(start))
		if i == 0 {
			at = last("gm", id)
		}
	}
	// Root's only: runsc's image files are readable by all.
	if fi, err := os.Stat(filepath.Join(a.dataDir, "snapshots", "memory", "mem0")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the memory's directory: %v %v", fi, err)
	}
	var imageSize int64
	_ = filepath.WalkDir(filepath.Join(a.dataDir, "snapshots", "memory", "mem0"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				imageSize += fi.Size()
			}
		}
		return nil
	})
	// The source runs on, its counter too.
	n := last("gm", id)
	time.Sleep(500 * time.Millisecond)
	if m := last("gm", id); m <= n {
		t.Errorf("the source's counter stopped after the take: %d then %d", n, m)
	}
	if r := a.must("exec", "--status", id, "gm"); r.stdout != "running\n" {
		t.Errorf("the source's command after the take: %v", r)
	}
	var snaps []struct {
		Name   string
		Memory bool
	}
	r := a.must("snapshot", "list", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &snaps); err != nil || len(snaps) != 3 || !snaps[0].Memory {
		t.Errorf("snapshot list --json: %v (%v)", r, err)
	}
	if r := a.must("snapshot", "list"); !strings.Contains(r.stdout, "MEMORY") || !strings.Contains(r.stdout, "yes") {
		t.Errorf("snapshot list: %v", r)
	}
	fgStop()

	var starts []time.Duration
	for i := 0; i < 3; i++ {
		name := "gmr" + strconv.Itoa(i)
		a.must("snapshot", "restore", "mem"+strconv.Itoa(i), "--as", name)
		defer a.run("sandbox", "rm", "-f", name)
		start := time.Now()
		a.must("sandbox", "start", name)
		starts = append(starts, time.Since(start))
	}
	// The restored command: running, its record the source's, its
	// output on after what it had written, its count on from the take.
	if r := a.must("exec", "--status", id, "gmr0"); r.stdout != "running\n" {
		t.Errorf("the restored command's status: %v", r)
	}
	before := strings.Fields(a.must("exec", "--logs", id, "gmr0").stdout)
	time.Sleep(800 * time.Millisecond)
	after := strings.Fields(a.must("exec", "--logs", id, "gmr0").stdout)
	if len(after) <= len(before) {
		t.Fatalf("the restored command does not write: %d lines then %d", len(before), len(after))
	}
	first, _ := strconv.Atoi(after[len(before)])
	if len(before) == 0 || first < at || first > at+50 {
		t.Errorf("restored at %v..., the count was %d at the take: the variable did not come back", after[len(before):], at)
	}
	for i := 1; i < len(after); i++ {
		p, _ := strconv.Atoi(after[i-1])
		c, _ := strconv.Atoi(after[i])
		if c != p+1 {
			t.Errorf("the counter's output jumps from %d to %d", p, c)
			break
		}
	}
	if r := a.must("exec", "gmr0", "--", "cat", "/tmp/kept"); r.stdout != "in-tmp\n" {
		t.Errorf("/tmp after the restore: %v", r)
	}
	if r := a.must("exec", "gmr0", "--", "cat", "/dev/kept"); r.stdout != "in-memory\n" {
		t.Errorf("a tmpfs's file after the restore: %v", r)
	}
	if a.psHas("gmr0", "sleep 4545") {
		t.Errorf("a foreground command came back")
	}
	// The restored command is the restored sandbox's own: --kill ends it.
	if r := a.must("exec", "--kill", id, "--json", "gmr0"); !strings.Contains(r.stdout, `"exit_code": 137`) && !strings.Contains(r.stdout, `"exit_code":137`) {
		t.Errorf("kill of the restored command: %v", r)
	}
	// The next start is a cold one: the command is not there.
	var colds []time.Duration
	for i := 0; i < 3; i++ {
		a.must("sandbox", "stop", "gmr1")
		start := time.Now()
		a.must("sandbox", "start", "gmr1")
		colds = append(colds, time.Since(start))
	}
	if r := a.must("exec", "--status", id, "gmr1"); r.stdout == "running\n" || a.psHas("gmr1", "i=1000") {
		t.Errorf("the second start resumed the command: %v", r)
	}
	if r := a.must("exec", "gmr1", "--", "cat", "/tmp/kept"); r.stdout != "in-tmp\n" {
		t.Errorf("/tmp after a cold start: %v", r)
	}
	if r := a.run("exec", "gmr1", "--", "cat", "/dev/kept"); r.code == 0 {
		t.Errorf("a tmpfs's file after a cold start (its memory is not kept): %v", r)
	}
	// A restore that fails (its image spoilt, the snapshot's own files
	// left as they are): the start fails and says so; the next one is a
	// cold boot.
	a.must("snapshot", "restore", "mem0", "--as", "gmbad")
	defer a.run("sandbox", "rm", "-f", "gmbad")
	img := filepath.Join(a.dataDir, "sandboxes", "gmbad", "memory", "image")
	ents, err := os.ReadDir(img)
	if err != nil || len(ents) == 0 {
		t.Fatalf("the restored sandbox's memory image: %v %v", ents, err)
	}
	for _, e := range ents {
		p := filepath.Join(img, e.Name())
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("not an image"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if r := a.run("sandbox", "start", "gmbad"); r.code != 125 || !strings.Contains(r.stderr, "restoring the memory snapshot") {
		t.Errorf("a start whose restore fails: %v", r)
	}
	a.must("sandbox", "start", "gmbad")
	if r := a.must("exec", "gmbad", "--", "cat", "/tmp/kept"); r.stdout != "in-tmp\n" {
		t.Errorf("the cold start after a failed restore: %v", r)
	}
	// The snapshot itself is whole: another restore of it resumes.
	a.must("snapshot", "restore", "mem0", "--as", "gmr3")
	defer a.run("sandbox", "rm", "-f", "gmr3")
	a.must("sandbox", "start", "gmr3")
	if r := a.must("exec", "--status", id, "gmr3"); r.stdout != "running\n" {
		t.Errorf("a restore after another's failure: %v", r)
	}
	if _, err := os.Stat(filepath.Join(a.dataDir, "sandboxes", "gmr1", "memory")); err == nil {
		t.Errorf("the memory image stayed in the restored sandbox's directory")
	}
	// A delete takes the memory with the snapshot.
	a.must("snapshot", "delete", "mem2")
	if _, err := os.Stat(filepath.Join(a.dataDir, "snapshots", "memory", "mem2")); err == nil {
		t.Errorf("snapshot delete left its memory")
	}
	t.Logf("take --memory %v (median of %v); first start of the restored sandbox %v (median of %v); a cold start of it %v (median of %v); the memory image %d bytes",
		medianOf(takes).Round(time.Millisecond), takes, medianOf(starts).Round(time.Millisecond), starts, medianOf(colds).Round(time.Millisecond), colds, imageSize)
}

// TestGVisorMemorySnapshotNetwork: a memory snapshot of a gvisor sandbox
// with a network (filtered egress and a published port) keeps it. A
// server started with exec -d, serving a file that exists in memory only
// (in its container's own /dev, a tmpfs of gVisor's), answers on the
// restored sandbox's published port at once after its first start; the
// restored sandbox's egress goes through its own helper under the same
// policy (an allowed name served, another one refused, the world never
// asked for it); the source's connection open through the take goes on.
func TestGVisorMemorySnapshotNetwork(t *testing.T) {
	a, ref, lab := gvNetEnv(t)
	a.must(append([]string{"sandbox", "create", "gmnet", "-B", "gvisor", "--image", ref, "--pull", "never", "-P", "18093:8000", "--start"}, filtered...)...)
	defer a.run("sandbox", "rm", "-f", "gmnet")
	a.must("exec", "-d", "gmnet", "--", "sh", "-c", "mkdir -p /dev/www && echo kept-in-memory > /dev/www/v.txt && exec httpd -f -p 8000 -h /dev/www")
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: lab.DialContext}}
	get := func(url string) (string, error) {
		resp, err := client.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return string(b), fmt.Errorf("%s", resp.Status)
		}
		return string(b), err
	}
	waitBody := func(url, want string) {
		t.Helper()
		var body string
		var err error
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if body, err = get(url); err == nil && body == want {
				return
			}
		}
		t.Fatalf("%s: %q %v, want %q", url, body, err, want)
	}
	waitBody("http://127.0.0.1:18093/v.txt", "kept-in-memory\n")
	if r := a.must("exec", "gmnet", "--", "wget", "-q", "-O", "-", "http://allowed.test/"); !strings.Contains(r.stdout, "netlab web host=allowed.test") {
		t.Fatalf("allowed name before the take: %v", r)
	}
	// A connection from the host open through the take: the source's
	// network goes on.
	conn, err := lab.DialContext(context.Background(), "tcp", "127.0.0.1:18093")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	a.must("snapshot", "take", "gmnet", "--name", "netmem", "--memory")
	if _, err := fmt.Fprintf(conn, "GET /v.txt HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatalf("the connection open through the take: %v", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, _ := io.ReadAll(conn); !strings.Contains(string(b), "kept-in-memory") {
		t.Errorf("the connection open through the take answered %q", b)
	}
	if r := a.must("snapshot", "list", "--json"); !strings.Contains(r.stdout, `"netmem"`) {
		t.Fatalf("snapshot list: %v", r)
	}

	// The source stopped (its port freed), the copy restored and started.
	a.must("sandbox", "stop", "gmnet")
	a.must("snapshot", "restore", "netmem", "--as", "gmnet2")
	defer a.run("sandbox", "rm", "-f", "gmnet2")
	a.must("sandbox", "start", "gmnet2")
	// No command is started: what answers is the restored server.
	waitBody("http://127.0.0.1:18093/v.txt", "kept-in-memory\n")
	if r := a.must("exec", "gmnet2", "--", "ps"); strings.Count(r.stdout, "httpd -f -p 8000") != 1 {
		t.Errorf("the restored server is not running: %v", r)
	}
	if r := a.must("exec", "gmnet2", "--", "wget", "-q", "-O", "-", "http://allowed.test/"); !strings.Contains(r.stdout, "netlab web host=allowed.test") {
		t.Errorf("allowed name after the restore: %v", r)
	}
	if r := a.run("exec", "gmnet2", "--", "sh", "-c", wgetRC("http://other.test/")); !strings.Contains(r.stdout, "rc=1") || lab.Reached(netlab.Web4(2)) {
		t.Errorf("a name the policy does not allow, after the restore: %v", r)
	}
	if r := a.must("exec", "gmnet2", "--", "sh", "-c", wgetRC("http://"+netlab.Web4(2)+"/")); !strings.Contains(r.stdout, "rc=1") || lab.Reached(netlab.Web4(2)) {
		t.Errorf("an address the policy does not allow, after the restore: %v", r)
	}
	// A second start is cold: no server.
	a.must("sandbox", "stop", "gmnet2")
	a.must("sandbox", "start", "gmnet2")
	if r := a.must("exec", "gmnet2", "--", "ps"); strings.Contains(r.stdout, "httpd -f") {
		t.Errorf("a cold start kept the memory: %v", r)
	}
	if body, err := get("http://127.0.0.1:18093/v.txt"); err == nil {
		t.Errorf("a cold start still serves %q", body)
	}
}

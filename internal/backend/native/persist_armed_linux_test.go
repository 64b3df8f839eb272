package native

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// bootPersistent boots a persistent sandbox of the test image with a
// memory and a pids limit (so that it has a cgroup); it is stopped and
// its ids released at the end of the test.
func bootPersistent(t testing.TB, name string) *Instance {
	t.Helper()
	requireRoot(t)
	if execStub == "" {
		t.Skip("persistent sandboxes need the exec stub (amd64)")
	}
	data := t.TempDir()
	b := New(Options{DataDir: data})
	spec := newSpec("true")
	spec.Name, spec.ID = name, randomID()
	spec.Resources = sandbox.Resources{MemoryMB: 256, PIDs: 64}
	dir := filepath.Join(data, "sandboxes", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	si, err := b.Boot(context.Background(), spec, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	inst := si.(*Instance)
	t.Cleanup(func() {
		inst.Stop()
		inst.Close()
		_ = b.ReleaseIDs(spec, dir)
	})
	return inst
}

// execOut runs args in the sandbox as user (the template's when "") and
// returns its output and wait status.
func execOut(t testing.TB, inst *Instance, user string, args ...string) (string, unix.WaitStatus) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	devNull, _ := os.Open(os.DevNull)
	defer devNull.Close()
	p, err := inst.Exec(&agent.ExecRequest{Args: args, User: user}, [3]int{int(devNull.Fd()), int(w.Fd()), int(w.Fd())})
	w.Close()
	if err != nil {
		t.Fatalf("exec %v: %v", args, err)
	}
	var out bytes.Buffer
	_, _ = out.ReadFrom(r)
	return out.String(), unix.WaitStatus(p.Wait())
}

// armedPid waits for the instance's armed stub and returns its pid.
func armedPid(t testing.TB, inst *Instance) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		inst.armMu.Lock()
		a := inst.armed
		inst.armMu.Unlock()
		if a != nil {
			return a.pid
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no armed exec stage")
	return 0
}

// TestPersistentExecArmed: a persistent sandbox has an exec stage armed
// from its start; an exec uses it and another is armed; one the host
// killed is replaced by a stub forked for the command (and a new one
// armed); a command of another user is served without using it; and
// Stop leaves no stub, and no cgroup, behind.
func TestPersistentExecArmed(t *testing.T) {
	inst := bootPersistent(t, "armed")
	first := armedPid(t, inst)
	inst.armMu.Lock()
	early := inst.armed.filterLoaded
	inst.armMu.Unlock()
	if !early {
		t.Error("with docker's seccomp profile the armed stub did not load the filter ahead")
	}
	if out, ws := execOut(t, inst, "", "sh", "-c", "id -u; pwd"); ws.ExitStatus() != 0 || out != "0\n/\n" {
		t.Fatalf("exec: %d %q", ws.ExitStatus(), out)
	}
	// The command has the umask the supervisor had at boot, whatever
	// umask the process held for a moment while a stub was being armed.
	armedPid(t, inst)
	inst.armMu.Lock()
	prev := inst.armed
	inst.armed = nil
	inst.armMu.Unlock()
	prev.kill()
	old := unix.Umask(0o077)
	inst.armAsync()
	armedPid(t, inst) // armed, in the background, under umask 077
	unix.Umask(old)
	if out, ws := execOut(t, inst, "", "sh", "-c", "umask"); ws.ExitStatus() != 0 || strings.TrimSpace(out) != fmt.Sprintf("%04o", old) {
		t.Errorf("umask of an armed exec: %q, want %04o", out, old)
	}
	if err := unix.Kill(first, 0); err == nil {
		t.Fatalf("armed stub %d still there after an exec: not used", first)
	}
	second := armedPid(t, inst)
	if second == first {
		t.Fatal("no new stub armed")
	}
	// Killed from the host: the next exec still runs, once, with its
	// seccomp filter.
	if err := unix.Kill(second, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if out, ws := execOut(t, inst, "", "sh", "-c", "echo once >> /tmp/count; cat /tmp/count; grep Seccomp: /proc/self/status"); ws.ExitStatus() != 0 || out != "once\nSeccomp:\t2\n" {
		t.Fatalf("exec after the armed stub was killed: %d %q", ws.ExitStatus(), out)
	}
	third := armedPid(t, inst)
	// Another user: served by a stub of its own, the armed one waits on.
	if out, ws := execOut(t, inst, "65534", "id", "-u"); ws.ExitStatus() != 0 || out != "65534\n" {
		t.Fatalf("exec as 65534: %d %q", ws.ExitStatus(), out)
	}
	if got := armedPid(t, inst); got != third {
		t.Errorf("a command of another user took the armed stub (%d, now %d)", third, got)
	}
	// The default user's groups change: the armed stub (with the old
	// ones) is not used, and the command gets the new ones.
	// (The next stub is armed as the command starts, before its edit.)
	if _, ws := execOut(t, inst, "", "sh", "-c", "sleep 0.3; echo extra:x:4242:root >> /etc/group"); ws.ExitStatus() != 0 {
		t.Fatal("editing /etc/group failed")
	}
	stale := armedPid(t, inst)
	if out, ws := execOut(t, inst, "", "id", "-G"); ws.ExitStatus() != 0 || !slices.Contains(strings.Fields(out), "4242") {
		t.Errorf("after a group change: %d %q", ws.ExitStatus(), out)
	}
	if err := unix.Kill(stale, 0); err == nil {
		t.Errorf("the stub armed with the old groups (%d) is still there", stale)
	}
	last := armedPid(t, inst)
	cgs := inst.r.cg.procsDirs()
	inst.Stop()
	inst.Close()
	if err := unix.Kill(last, 0); err == nil {
		t.Errorf("armed stub %d left after Stop", last)
	}
	for _, d := range cgs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup %s left after Stop", d)
		}
	}
}

// TestArmedStubKilledWhileArming: a stub killed before it reports ready
// (as Stop's disarm does to one still arming) ends the arming at once,
// with no stub armed, and Stop returns. The supervisor held the stub's
// ends of its socket and pipe while it armed, so the arming waited for
// ever on a dead stub, and so did Stop.
func TestArmedStubKilledWhileArming(t *testing.T) {
	inst := bootPersistent(t, "arming")
	armedPid(t, inst)
	inst.armMu.Lock()
	a := inst.armed
	inst.armed = nil
	inst.armMu.Unlock()
	a.kill()
	killed := 0
	for try := 0; try < 50 && killed < 3; try++ {
		inst.armAsync()
		inst.armMu.Lock()
		ch := inst.arming
		inst.armMu.Unlock()
		if ch == nil {
			t.Fatal("armAsync started no arming")
		}
		// Kill the stub as soon as it has a pid, before it is ready.
		for {
			inst.armMu.Lock()
			pid, done := inst.armPid, inst.arming == nil
			inst.armMu.Unlock()
			if pid > 0 {
				_ = unix.Kill(pid, unix.SIGKILL)
				break
			}
			if done {
				break
			}
			runtime.Gosched()
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("the arming of a killed stub did not end")
		}
		inst.armMu.Lock()
		a := inst.armed
		inst.armed = nil
		inst.armMu.Unlock()
		if a == nil {
			killed++ // killed before it was ready
		} else {
			a.kill() // it was ready before the kill: again
		}
	}
	if killed == 0 {
		t.Skip("every stub was ready before it could be killed")
	}
	stopped := make(chan struct{})
	go func() { inst.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return")
	}
}

// BenchmarkPersistentExec: exec /bin/true into a persistent sandbox and
// wait for it, with the armed exec stage ("armed") and with a stub
// forked per command ("forked", arming off), alternating between two
// sandboxes in one run so that both see the same load.
func BenchmarkPersistentExec(b *testing.B) {
	armed := bootPersistent(b, "armed")
	forked := bootPersistent(b, "forked")
	forked.disarm()
	armedPid(b, armed)
	var ta, tf []time.Duration
	ready := 0
	devNull, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer devNull.Close()
	fd := int(devNull.Fd())
	run := func(inst *Instance) time.Duration {
		t0 := time.Now()
		p, err := inst.Exec(&agent.ExecRequest{Args: []string{"/bin/true"}}, [3]int{fd, fd, fd})
		if err != nil {
			b.Fatal(err)
		}
		if ws := p.Wait(); ws.ExitStatus() != 0 {
			b.Fatal(ws)
		}
		return time.Since(t0)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tf = append(tf, run(forked))
		armed.armMu.Lock()
		if armed.armed != nil {
			ready++
		}
		armed.armMu.Unlock()
		ta = append(ta, run(armed))
		time.Sleep(2 * time.Millisecond) // a client's think time: the next stub is armed meanwhile
	}
	b.StopTimer()
	med := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	b.ReportMetric(med(ta), "ms-armed")
	b.ReportMetric(med(tf), "ms-forked")
	b.Logf("exec+wait of /bin/true, medians over %d: armed %s ms (a stub ready for %d), forked %s ms", b.N,
		strconv.FormatFloat(med(ta), 'f', 2, 64), ready, strconv.FormatFloat(med(tf), 'f', 2, 64))
}

// TestArmedLateSyscalls: an armed stub that loaded the seccomp filter at
// the end of its set-up makes only armedLateSyscalls afterwards (its
// report, its read of the request, the request's script, whatever the
// request), and loads no second filter; one that did not, loads it in
// the request's script, after the fork.
func TestArmedLateSyscalls(t *testing.T) {
	late := map[uint64]bool{}
	for _, nr := range armedLateSyscalls {
		late[uint64(nr)] = true
	}
	filter := make([]byte, 8*4)
	cfg := execConfig{Args: []string{"/bin/true"}, Workdir: "/", Landlock: true, NoFile: 1024,
		Groups: []int{1, 2}, LandlockRW: []string{"/tmp"}, Filter: filter, filterLoaded: true, umask: 0o22, setUmask: true}
	join, setup, err := armScripts(&cfg, 2, 7, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(join.recs) > armJoinRecords+2 {
		t.Errorf("the join script has %d records, over its room (%d)", len(join.recs), armJoinRecords+2)
	}
	if _, err := join.encode(); err != nil {
		t.Error(err)
	}
	at := slices.IndexFunc(setup.recs, func(r stubRecord) bool { return r.nr == unix.SYS_SECCOMP })
	if at < 0 {
		t.Fatal("the set-up does not load the filter")
	}
	recs := setup.recs[at+1:]
	for _, tty := range []bool{false, true} {
		cfg.TTY = tty
		req := armedRequestScript(&cfg, "/bin/true")
		if len(req.recs) > armRequestRecords {
			t.Errorf("the request's script has %d records, over its room (%d)", len(req.recs), armRequestRecords)
		}
		fork := slices.IndexFunc(req.recs, func(r stubRecord) bool { return r.nr == stubFork })
		if fork < 0 || req.recs[fork-1].nr != unix.SYS_WRITE {
			t.Errorf("the request's script does not say it forks right before its fork: %+v", req.recs)
		}
		recs = append(recs, req.recs...)
	}
	for _, r := range recs {
		switch {
		case r.nr == stubPoke || r.nr == stubChain || r.nr == stubFork:
			if r.nr == stubFork && !late[stubForkSyscall] {
				t.Error("the fork is not in armedLateSyscalls")
			}
		case r.nr == unix.SYS_SECCOMP:
			t.Errorf("%q: a second filter", r.desc)
		case !late[r.nr]:
			t.Errorf("%q makes syscall %d, not in armedLateSyscalls", r.desc, r.nr)
		}
	}
	cfg.filterLoaded = false
	join, _, _ = armScripts(&cfg, 0, 5, true)
	if slices.ContainsFunc(join.recs, func(r stubRecord) bool { return r.nr == unix.SYS_SECCOMP }) {
		t.Error("a set-up without filterLoaded loads the filter")
	}
	req := armedRequestScript(&cfg, "/bin/true")
	s := slices.IndexFunc(req.recs, func(r stubRecord) bool { return r.nr == unix.SYS_SECCOMP })
	f := slices.IndexFunc(req.recs, func(r stubRecord) bool { return r.nr == stubFork })
	if s < f {
		t.Errorf("without filterLoaded the request's script does not load the filter after the fork (%d, fork %d)", s, f)
	}
}

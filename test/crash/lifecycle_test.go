//go:build linux

package crash

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/supervisor"
)

// lifecycleRuns is how many operations TestKillLifecycle kills by
// default; AGENTKERNEL_CRASH_RUNS sets another count (.ci/run: 200).
const lifecycleRuns = 40

// lcOp is an operation of a persistent sandbox's life that is killed.
type lcOp int

const (
	opTakeRunning lcOp = iota // snapshot take of a running sandbox
	opTakeStopped             // snapshot take of a stopped one
	opRestore                 // snapshot restore into a new name
	opStop                    // sandbox stop
	opStart                   // sandbox start
	numOps
)

var opNames = [numOps]string{"take-running", "take-stopped", "restore", "stop", "start"}

// lcVictim is who dies.
type lcVictim int

const (
	victimClient     lcVictim = iota // the CLI process, or the API server the request went to
	victimSupervisor                 // the sandbox's supervisor
)

// lcSnap is a snapshot the test took (or tried to): the files its
// sandbox had synced before the take began, which it must hold if it
// is listed.
type lcSnap struct {
	sandbox  string
	files    map[string]string
	verified bool
}

// lcWorld is what TestKillLifecycle knows must be true.
type lcWorld struct {
	t   *testing.T
	a   *ak
	api *lcServe
	// files are, per sandbox, the files (in its root and in its
	// copy-on-write /workspace) written and synced so far, with their
	// contents.
	files map[string]map[string]string
	snaps map[string]*lcSnap
	// dur and apiDur are how long each operation took unkilled through
	// the CLI and through the API (the ranges of kill moments).
	dur, apiDur [numOps]time.Duration
}

// TestKillLifecycle kills, with SIGKILL at a random moment, the CLI, the
// API server (the daemon's face) or the sandbox's supervisor while a
// persistent sandbox is snapshotted (running or stopped), restored,
// stopped or started, 40 times (AGENTKERNEL_CRASH_RUNS), each time after
// the sandbox wrote and synced new files in its root and in /workspace
// (the copy-on-write project). After each kill: the sandbox starts again
// and every file it synced is there, with its content, and it answers
// (not left frozen); a snapshot the killed take was making is either
// absent (restore says not found) or listed and restorable with every
// file synced before the take; a sandbox the killed restore was making
// is absent or starts with the snapshot's files. At the end everything
// is removed and nothing is left: no layer, record of a move, process
// or mount. The seed is printed; AGENTKERNEL_CRASH_SEED replays it.
func TestKillLifecycle(t *testing.T) {
	testStart := time.Now()
	runs := lifecycleRuns
	if s := os.Getenv("AGENTKERNEL_CRASH_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("AGENTKERNEL_CRASH_RUNS=%q", s)
		}
		runs = n
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("AGENTKERNEL_CRASH_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("AGENTKERNEL_CRASH_SEED=%q", s)
		}
		seed = n
	}
	t.Logf("seed %d (AGENTKERNEL_CRASH_SEED=%d replays it)", seed, seed)
	fmt.Printf("TestKillLifecycle: seed %d\n", seed)
	rng := rand.New(rand.NewPCG(seed, 0x11fe))

	a := newAK(t)
	loadTestImage(t, a)
	mountsBefore := readMounts(t)
	w := &lcWorld{t: t, a: a, files: map[string]map[string]string{}, snaps: map[string]*lcSnap{}}
	w.api = startLCServe(t, a)
	t.Cleanup(func() { w.api.kill() }) // the server of the moment
	names := []string{"lc0", "lc1"}
	for _, n := range names {
		w.must("sandbox", "create", n, "--image", imageRef, "--start")
		w.files[n] = map[string]string{}
		// Data that takes a while to copy: a running take's kill can
		// land while the sandbox is frozen.
		w.must("exec", n, "--", "sh", "-c", "dd if=/dev/zero of=/root/big bs=1M count=48 2>/dev/null && sync")
	}
	t.Cleanup(func() {
		for _, n := range w.sandboxNames() {
			a.run(t, "sandbox", "rm", "--force", n)
		}
	})
	w.calibrate("lc0")
	t.Logf("unkilled: %s", w.durations())
	began := time.Now()

	var byOp [numOps]int
	var viaAPI, supKills, done int
	for i := 0; i < runs && !t.Failed(); i++ {
		done++
		name := names[rng.IntN(len(names))]
		op := lcOp(rng.IntN(int(numOps)))
		pool := w.verifiedSnaps()
		if op == opRestore && len(pool) == 0 {
			op = opTakeRunning
		}
		api := rng.IntN(3) == 0
		victim := victimClient
		if (op == opTakeRunning || op == opStop || op == opStart) && rng.IntN(3) == 0 {
			victim = victimSupervisor
		}
		delay := time.Duration(rng.Float64() * 1.3 * float64(w.dur[op]))
		if api {
			delay = time.Duration(rng.Float64() * 1.3 * float64(w.apiDur[op]))
		}
		content := strconv.FormatUint(rng.Uint64(), 36)
		desc := fmt.Sprintf("run %d: %s of %s via %s, %s killed after %v", i, opNames[op], name,
			map[bool]string{true: "the API", false: "the CLI"}[api],
			map[lcVictim]string{victimClient: "client", victimSupervisor: "supervisor"}[victim], delay.Round(time.Millisecond))
		byOp[op]++
		if api {
			viaAPI++
		}
		if victim == victimSupervisor {
			supKills++
		}

		w.ensureRunning(name, desc)
		w.writeSynced(name, i, content, desc)
		var args []string
		snap, as := fmt.Sprintf("s%d", i), fmt.Sprintf("r%d", i)
		switch op {
		case opTakeRunning, opTakeStopped:
			if op == opTakeStopped {
				w.must("sandbox", "stop", name)
			}
			w.snaps[snap] = &lcSnap{sandbox: name, files: clone(w.files[name])}
			args = []string{"snapshot", "take", name, "--name", snap}
		case opRestore:
			snap = pool[rng.IntN(len(pool))]
			args = []string{"snapshot", "restore", snap, "--as", as}
		case opStop:
			args = []string{"sandbox", "stop", name}
		case opStart:
			w.must("sandbox", "stop", name)
			args = []string{"sandbox", "start", name}
		}
		res := w.killDuring(args, api, victim, name, delay)
		t.Logf("%s: %s exit %d (signal %d) after %v %s", desc, strings.Join(res.args, " "), res.code, int(res.signal),
			res.took.Round(time.Millisecond), strings.TrimSpace(res.stderr))
		if hasStackTrace(res.stderr) {
			t.Errorf("%s: a stack trace: %v", desc, res)
		}
		w.check(desc, name, op, snap, as)
		if len(w.snaps) > 4 {
			w.dropOldestSnap()
		}
	}
	took := time.Since(began)
	w.api.kill()

	// Everything goes, and nothing is left.
	for _, n := range w.sandboxNames() {
		w.must("sandbox", "rm", "--force", n)
	}
	for s := range w.snaps {
		if r := a.run(t, "snapshot", "delete", s); r.code != 0 && !strings.Contains(r.stderr, "not found") {
			t.Errorf("snapshot delete %s: %v", s, r)
		}
	}
	w.must("sandbox", "gc")
	for _, pat := range []string{"snapshots/layers/*", "snapshots/*.pending", "snapshots/*.json", "sandboxes/*"} {
		if left, _ := filepath.Glob(filepath.Join(a.dataDir, pat)); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	}
	if left := waitGone(func() []string { return ourProcesses(a.dataDir) }, 5*time.Second); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
	for _, m := range leftoverMounts(t, mountsBefore, a.dataDir) {
		t.Errorf("left behind: %s", m)
	}
	for _, c := range frozenCgroups(testStart) {
		t.Errorf("left frozen: %s", c)
	}
	summary := fmt.Sprintf("lifecycle: %d kills in %v (%s; %d through the API, %d of the supervisor)",
		done, took.Round(time.Second), formatOps(byOp), viaAPI, supKills)
	fmt.Println(summary)
	t.Log(summary)
}

func formatOps(n [numOps]int) string {
	var parts []string
	for i, c := range n {
		parts = append(parts, fmt.Sprintf("%s %d", opNames[i], c))
	}
	return strings.Join(parts, ", ")
}

func clone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// must runs agentkernel and fails the test unless it exits 0.
func (w *lcWorld) must(args ...string) result {
	w.t.Helper()
	r := w.a.run(w.t, args...)
	if r.code != 0 || hasStackTrace(r.stderr) {
		w.t.Fatalf("%v", r)
	}
	return r
}

// runFor runs agentkernel for at most d (a frozen sandbox's exec hangs).
func (w *lcWorld) runFor(d time.Duration, args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c := w.a.cmd(ctx, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	start := time.Now()
	err := c.Run()
	r := finishQuiet(args, err, out.String(), errb.String(), time.Since(start))
	if ctx.Err() != nil {
		r.stderr += fmt.Sprintf("\n(killed: no answer within %v)", d)
		r.code = -1
	}
	return r
}

// calibrate times each operation unkilled on the sandbox name.
func (w *lcWorld) calibrate(name string) {
	timed := func(op lcOp, args ...string) {
		start := time.Now()
		w.must(args...)
		w.dur[op] = time.Since(start)
	}
	w.writeSynced(name, -1, "calibrate", "calibration")
	timed(opTakeRunning, "snapshot", "take", name, "--name", "cal1")
	timed(opStop, "sandbox", "stop", name)
	timed(opTakeStopped, "snapshot", "take", name, "--name", "cal2")
	timed(opStart, "sandbox", "start", name)
	timed(opRestore, "snapshot", "restore", "cal1", "--as", "rcal")
	w.must("sandbox", "start", "rcal")
	w.checkFiles("calibration", "rcal", w.files[name])
	w.must("sandbox", "rm", "--force", "rcal")
	w.must("snapshot", "delete", "cal1")
	w.must("snapshot", "delete", "cal2")
	w.checkFiles("calibration", name, w.files[name])
	viaAPI := func(op lcOp, args ...string) {
		if r := w.api.do(args); r.code/100 != 2 {
			w.t.Fatalf("calibration: %v", r)
		} else {
			w.apiDur[op] = r.took
		}
	}
	viaAPI(opTakeRunning, "snapshot", "take", name, "--name", "cal3")
	viaAPI(opStop, "sandbox", "stop", name)
	viaAPI(opTakeStopped, "snapshot", "take", name, "--name", "cal4")
	viaAPI(opStart, "sandbox", "start", name)
	viaAPI(opRestore, "snapshot", "restore", "cal3", "--as", "rcal")
	w.must("sandbox", "rm", "--force", "rcal")
	w.must("snapshot", "delete", "cal3")
	w.must("snapshot", "delete", "cal4")
}

func (w *lcWorld) durations() string {
	var parts []string
	for i, d := range w.dur {
		parts = append(parts, fmt.Sprintf("%s %v (API %v)", opNames[i], d.Round(time.Millisecond), w.apiDur[i].Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

// ensureRunning starts the sandbox (it must start, whatever was killed
// before).
func (w *lcWorld) ensureRunning(name, desc string) {
	w.t.Helper()
	if r := w.runFor(60*time.Second, "sandbox", "start", name); r.code != 0 || hasStackTrace(r.stderr) {
		log, _ := os.ReadFile(filepath.Join(w.a.dataDir, "sandboxes", name, "supervisor.log"))
		if len(log) > 2000 {
			log = log[len(log)-2000:]
		}
		w.t.Fatalf("%s: the sandbox does not start again: %v\ncgroups: %s\nsupervisor.log: %s", desc, r, strings.Join(ourCgroups(), "; "), log)
	}
}

// writeSynced writes a file in the sandbox's root and one in its
// /workspace, syncs, and records them.
func (w *lcWorld) writeSynced(name string, i int, content, desc string) {
	w.t.Helper()
	root, ws := fmt.Sprintf("/root/f%d", i), fmt.Sprintf("/workspace/w%d", i)
	script := fmt.Sprintf("echo %s > %s && echo %s > %s && sync", content, root, content, ws)
	if r := w.runFor(30*time.Second, "exec", name, "--", "sh", "-c", script); r.code != 0 {
		w.t.Fatalf("%s: writing files: %v", desc, r)
	}
	w.files[name][root] = content
	w.files[name][ws] = content
}

// checkFiles checks that the running sandbox name has every file of
// files with its content (and answers at all).
func (w *lcWorld) checkFiles(desc, name string, files map[string]string) {
	w.t.Helper()
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var script strings.Builder
	for _, p := range paths {
		fmt.Fprintf(&script, "echo \"%s $(cat %s 2>&1)\"; ", p, p)
	}
	r := w.runFor(30*time.Second, "exec", name, "--", "sh", "-c", script.String()+"true")
	if r.code != 0 {
		w.t.Errorf("%s: sandbox %s does not answer: %v", desc, name, r)
		return
	}
	var want strings.Builder
	for _, p := range paths {
		fmt.Fprintf(&want, "%s %s\n", p, files[p])
	}
	if r.stdout != want.String() {
		w.t.Errorf("%s: sandbox %s lost files:\ngot:\n%s\nwant:\n%s", desc, name, r.stdout, want.String())
	}
}

// killDuring runs the operation args (through the CLI, or the same
// request to the API server) and kills the victim after delay.
func (w *lcWorld) killDuring(args []string, api bool, victim lcVictim, name string, delay time.Duration) result {
	w.t.Helper()
	done := make(chan result, 1)
	var cliPid int
	if api {
		go func() { done <- w.api.do(args) }()
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c := w.a.cmd(ctx, args...)
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		start := time.Now()
		if err := c.Start(); err != nil {
			w.t.Fatal(err)
		}
		cliPid = c.Process.Pid
		go func() {
			err := c.Wait()
			done <- finishQuiet(args, err, out.String(), errb.String(), time.Since(start))
		}()
	}
	select {
	case r := <-done:
		return r // finished before the kill
	case <-time.After(delay):
	}
	switch {
	case victim == victimSupervisor:
		killSupervisor(w.a.dataDir, name)
	case api:
		w.api.kill()
	default:
		_ = syscall.Kill(cliPid, syscall.SIGKILL)
	}
	r := <-done
	if api && victim == victimClient {
		w.api = startLCServe(w.t, w.a)
	}
	return r
}

// killSupervisor kills the sandbox's supervisor, if it runs.
func killSupervisor(dataDir, name string) {
	b, err := os.ReadFile(filepath.Join(dataDir, "sandboxes", name, "supervisor.pid"))
	if err != nil {
		return
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscanf(string(b), "%d %d", &pid, &start); err != nil {
		return
	}
	if st, err := supervisor.ProcStart(pid); err != nil || st != start || !isBinary(exeOf(pid)) {
		return // not ours any more
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// check is the recovery after a kill: the sandbox starts with its
// files; the snapshot a take was making is absent or whole; the sandbox
// a restore was making is absent or whole.
func (w *lcWorld) check(desc, name string, op lcOp, snap, as string) {
	w.t.Helper()
	w.ensureRunning(name, desc)
	w.checkFiles(desc, name, w.files[name])
	switch op {
	case opTakeRunning, opTakeStopped:
		if w.listedSnap(snap) {
			w.verifySnap(desc, snap)
		} else {
			delete(w.snaps, snap)
			if r := w.a.run(w.t, "snapshot", "restore", snap, "--as", "absent"); r.code != 125 || !strings.Contains(r.stderr, "not found") {
				w.t.Errorf("%s: snapshot %s is not listed, but restore says: %v", desc, snap, r)
			}
			if r := w.a.run(w.t, "sandbox", "rm", "--force", "absent"); r.code == 0 {
				w.t.Errorf("%s: a restore of unlisted snapshot %s made a sandbox", desc, snap)
			}
		}
	case opRestore:
		if slices.Contains(w.sandboxNames(), as) {
			if r := w.runFor(60*time.Second, "sandbox", "start", as); r.code != 0 {
				w.t.Errorf("%s: the restored sandbox %s is listed but does not start: %v", desc, as, r)
			} else {
				w.checkFiles(desc, as, w.snaps[snap].files)
			}
			w.must("sandbox", "rm", "--force", as)
		}
		if !w.listedSnap(snap) {
			w.t.Errorf("%s: snapshot %s went missing", desc, snap)
		}
	}
}

// verifySnap restores a listed snapshot and checks its files.
func (w *lcWorld) verifySnap(desc, snap string) {
	w.t.Helper()
	s := w.snaps[snap]
	const as = "verify"
	if r := w.runFor(60*time.Second, "snapshot", "restore", snap, "--as", as); r.code != 0 {
		w.t.Errorf("%s: snapshot %s is listed but does not restore: %v", desc, snap, r)
		return
	}
	if r := w.runFor(60*time.Second, "sandbox", "start", as); r.code != 0 {
		w.t.Errorf("%s: the sandbox restored from %s does not start: %v", desc, snap, r)
	} else {
		w.checkFiles(desc+" (restored from "+snap+")", as, s.files)
	}
	w.must("sandbox", "rm", "--force", as)
	s.verified = true
}

func (w *lcWorld) listedSnap(snap string) bool {
	w.t.Helper()
	r := w.must("snapshot", "list", "--json")
	var list []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		w.t.Fatalf("snapshot list: %v: %v", err, r)
	}
	return slices.ContainsFunc(list, func(s struct {
		Name string `json:"name"`
	}) bool {
		return s.Name == snap
	})
}

func (w *lcWorld) verifiedSnaps() []string {
	var out []string
	for n, s := range w.snaps {
		if s.verified {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// dropOldestSnap deletes the oldest snapshot (by the run that took it).
func (w *lcWorld) dropOldestSnap() {
	oldest, n := "", -1
	for s := range w.snaps {
		k, _ := strconv.Atoi(strings.TrimPrefix(s, "s"))
		if n < 0 || k < n {
			oldest, n = s, k
		}
	}
	w.must("snapshot", "delete", oldest)
	delete(w.snaps, oldest)
}

func (w *lcWorld) sandboxNames() []string {
	r := w.a.run(w.t, "sandbox", "list", "--json")
	var list []struct {
		Name string `json:"name"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil {
		w.t.Fatalf("sandbox list: %v", r)
	}
	var out []string
	for _, s := range list {
		out = append(out, s.Name)
	}
	return out
}

// frozenCgroups lists cgroups of ours left frozen: v1 freezer cgroups
// named agentkernel-* that are FROZEN, v2 ones with cgroup.freeze 1,
// made since (other runs on this machine made the older ones).
func frozenCgroups(since time.Time) []string {
	var out []string
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Count(p, "/") > 10 {
			return filepath.SkipDir
		}
		if !strings.HasPrefix(d.Name(), "agentkernel-") {
			return nil
		}
		if fi, err := d.Info(); err != nil || fi.ModTime().Before(since.Add(-time.Second)) {
			return filepath.SkipDir
		}
		if b, err := os.ReadFile(filepath.Join(p, "freezer.state")); err == nil && strings.TrimSpace(string(b)) != "THAWED" {
			out = append(out, p+" "+strings.TrimSpace(string(b)))
		}
		if b, err := os.ReadFile(filepath.Join(p, "cgroup.freeze")); err == nil && strings.TrimSpace(string(b)) == "1" {
			out = append(out, p+" cgroup.freeze 1")
		}
		return nil
	})
	return out
}

// ourCgroups lists the agentkernel-* cgroups, with their processes and
// freezer state, for a failure's report.
func ourCgroups() []string {
	var out []string
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Count(p, "/") > 10 {
			return filepath.SkipDir
		}
		if !strings.HasPrefix(d.Name(), "agentkernel-") {
			return nil
		}
		procs, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		state, _ := os.ReadFile(filepath.Join(p, "freezer.state"))
		out = append(out, fmt.Sprintf("%s procs %v %s", p, strings.Fields(string(procs)), strings.TrimSpace(string(state))))
		return filepath.SkipDir
	})
	return out
}

// lcServe is `agentkernel serve` on a unix socket.
type lcServe struct {
	cmd    *exec.Cmd
	sock   string
	client *http.Client
}

func startLCServe(t *testing.T, a *ak) *lcServe {
	t.Helper()
	sock := filepath.Join(a.home, fmt.Sprintf("api-%d.sock", time.Now().UnixNano()))
	c := a.cmd(context.Background(), "serve", "--unix", sock)
	var errb bytes.Buffer
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	s := &lcServe{cmd: c, sock: sock, client: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if conn, err := net.Dial("unix", sock); err == nil {
			conn.Close()
			return s
		}
		if time.Now().After(deadline) {
			s.kill()
			t.Fatalf("serve did not listen on %s: %s", sock, errb.String())
		}
	}
}

func (s *lcServe) kill() {
	if s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	_ = os.Remove(s.sock)
}

// do sends the API request that does what the command line args does.
func (s *lcServe) do(args []string) result {
	var method, path string
	var body any
	switch {
	case args[0] == "snapshot" && args[1] == "take":
		method, path, body = "POST", "/snapshots", map[string]string{"sandbox": args[2], "name": args[4]}
	case args[0] == "snapshot" && args[1] == "restore":
		method, path, body = "POST", "/snapshots/"+args[2]+"/restore", map[string]string{"as_name": args[4]}
	case args[0] == "sandbox":
		method, path, body = "POST", "/sandboxes/"+args[2]+"/"+args[1], map[string]string{}
	default:
		panic(fmt.Sprint("no API request for ", args))
	}
	b, _ := json.Marshal(body)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, bytes.NewReader(b))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	r := result{args: append([]string{"(API)"}, args...)}
	resp, err := s.client.Do(req)
	if err != nil {
		r.code, r.stderr = -1, err.Error()
	} else {
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r.code, r.stdout = resp.StatusCode, string(out)
	}
	r.took = time.Since(start)
	return r
}

// TestStartFinishesKilledTake: a stopped sandbox's snapshot killed after
// it moved the sandbox's writable layers into the store, before the
// sandbox stacked them (what its record of the move, <id>.pending,
// says), loses nothing: the next start of the sandbox finishes the move
// first and the sandbox sees every file, in its root and in /workspace.
func TestStartFinishesKilledTake(t *testing.T) {
	a := newAK(t)
	loadTestImage(t, a)
	w := &lcWorld{t: t, a: a, files: map[string]map[string]string{"kt": {}}}
	w.must("sandbox", "create", "kt", "--image", imageRef, "--start")
	t.Cleanup(func() { a.run(t, "sandbox", "rm", "--force", "kt") })
	w.writeSynced("kt", 1, "before", "set-up")
	w.must("sandbox", "stop", "kt")
	// What a take killed midway left: the records, the renames.
	if err := os.MkdirAll(filepath.Join(a.dataDir, "snapshots", "layers"), 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(a.dataDir, "sandboxes", "kt")
	// The owners move from the sandbox's block of host ids to the
	// image's (no shift) on the way.
	b, err := os.ReadFile(filepath.Join(dir, "idrange"))
	if err != nil {
		t.Fatal(err)
	}
	shift := fmt.Sprintf(`,"from":%s,"to":0,"size":65536`, strings.TrimSpace(string(b)))
	for i, l := range []struct {
		upper string
		mount string
	}{{filepath.Join(dir, "upper"), ""}, {filepath.Join(dir, "cow0", "upper"), `,"mount":0`}} {
		id := fmt.Sprintf("0123abcd%d", i)
		layer := filepath.Join(a.dataDir, "snapshots", "layers", id)
		rec := fmt.Sprintf(`{"sandbox":"kt","layer":%q%s%s}`, layer, shift, l.mount)
		if err := os.WriteFile(filepath.Join(a.dataDir, "snapshots", id+".pending"), []byte(rec), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(l.upper, layer); err != nil {
			t.Fatal(err)
		}
	}
	w.ensureRunning("kt", "after the killed take")
	w.checkFiles("after the killed take", "kt", w.files["kt"])
	if left, _ := filepath.Glob(filepath.Join(a.dataDir, "snapshots", "*.pending")); len(left) > 0 {
		t.Errorf("records left: %v", left)
	}
}

// TestStartFinishesKilledStop: a `sandbox stop` killed after it told the
// supervisor to stop, while the sandbox's processes still have their
// grace period (one ignores SIGTERM), leaves a supervisor that still
// answers but is ending the sandbox. The next start must not take it
// for running: it finishes the stop and starts the sandbox afresh, so
// that a command run after the grace period has passed still finds it.
func TestStartFinishesKilledStop(t *testing.T) {
	a := newAK(t)
	loadTestImage(t, a)
	w := &lcWorld{t: t, a: a, files: map[string]map[string]string{"ks": {}}}
	w.must("sandbox", "create", "ks", "--image", imageRef, "--start")
	t.Cleanup(func() { a.run(t, "sandbox", "rm", "--force", "ks") })
	w.must("exec", "-d", "ks", "--", "sh", "-c", "trap 'echo term > /root/got-term' TERM; while :; do sleep 0.1; done")
	mark := filepath.Join(a.dataDir, "sandboxes", "ks", "upper", "root", "got-term")
	time.Sleep(300 * time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stop := a.cmd(ctx, "sandbox", "stop", "ks")
	if err := stop.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(mark); err == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = stop.Process.Kill()
			_ = stop.Wait()
			t.Fatal("the sandbox's command never got the stop's SIGTERM")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Told, and in its grace period: the stop's caller dies.
	_ = stop.Process.Kill()
	_ = stop.Wait()

	w.ensureRunning("ks", "after the killed stop")
	// Past the grace period of the cut stop (3 s): a sandbox that was only
	// said to run would be gone by now.
	time.Sleep(4 * time.Second)
	if r := a.run(t, "exec", "ks", "--", "echo", "alive"); r.code != 0 || !strings.Contains(r.stdout, "alive") {
		t.Fatalf("the sandbox started after the killed stop does not answer: %v", r)
	}
	if r := a.run(t, "sandbox", "list"); !strings.Contains(r.stdout, "running") {
		t.Errorf("sandbox list after the start: %v", r)
	}
	if _, err := os.Stat(filepath.Join(a.dataDir, "sandboxes", "ks", "stopping")); !os.IsNotExist(err) {
		t.Errorf("the stop's marker is left after the start: %v", err)
	}
}

// TestStartRightAfterSupervisorKilled: a supervisor killed with SIGKILL
// holds its listening socket, and takes connections, until the kernel
// has closed its descriptors. A start right after the kill must not take
// such a connection for a running sandbox: each time, a command run
// right after the start must find the sandbox answering.
func TestStartRightAfterSupervisorKilled(t *testing.T) {
	a := newAK(t)
	loadTestImage(t, a)
	w := &lcWorld{t: t, a: a, files: map[string]map[string]string{"sk": {}}}
	w.must("sandbox", "create", "sk", "--image", imageRef, "--start")
	t.Cleanup(func() { a.run(t, "sandbox", "rm", "--force", "sk") })
	for i := range 30 {
		killSupervisor(a.dataDir, "sk")
		w.ensureRunning("sk", fmt.Sprintf("kill %d", i))
		if r := a.run(t, "exec", "sk", "--", "echo", "alive"); r.code != 0 || !strings.Contains(r.stdout, "alive") {
			t.Fatalf("kill %d: the sandbox said started does not answer: %v", i, r)
		}
	}
}

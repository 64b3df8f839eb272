//go:build linux

package crash

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/agentkernel/agentkernel/internal/image/imagetest"
)

const (
	// crashRuns is how many runs are killed (AK_CRASH_RUNS overrides it
	// for quick local tries; CI uses the default).
	crashRuns = 200
	// crashParallel runs are in flight at once.
	crashParallel = 4
	// maxKillDelay bounds the random moment of the kill after start.
	maxKillDelay = 60 * time.Millisecond
	// cgroupGrace is native.GC's grace for empty cgroups (cgroupGrace in
	// internal/backend/native/gc_linux.go): younger ones are spared
	// because a live run may not have joined yet.
	cgroupGrace = 30 * time.Second
	// imageRef is the tag the test image is loaded under.
	imageRef = "crashtest/busybox:1"
	// markerFile holds marker in the test image.
	markerFile = "/etc/agentkernel-crash"
	marker     = "crash-image"
)

// scratchCandidates are the host directories the native backend's
// per-run tmpfs may cover inside a sandbox's mount namespace
// (rootfs_linux.go); a tmpfs on one of them in the host's namespace is a
// leak.
var scratchCandidates = []string{"/tmp", "/mnt", "/run", "/var/tmp", "/media", "/srv", "/opt", "/home"}

// stage is where a run was when it was killed, as seen from /proc.
type stage int

const (
	stageStarting  stage = iota // agentkernel has no child yet (parsing, config, image lookup, cgroup)
	stageInit                   // the sandbox init exists, the exec stage not yet (mounts)
	stageExecStage              // the exec stage exists but has not exec'd the command
	stageCommand                // the command runs
	stageFinished               // agentkernel had already exited
	numStages
)

var stageNames = [numStages]string{"starting", "init-setup", "exec-setup", "command", "finished"}

// killPlan is what one iteration does.
type killPlan struct {
	i         int
	delay     time.Duration
	killInit  bool // SIGKILL the sandbox init rather than agentkernel
	parentToo bool // after killing the init, kill agentkernel as well
	// caller, when set, is a cgroup v1 memory cgroup agentkernel is
	// started in: another caller than the one that runs gc (a service
	// versus a login shell), whose sandbox cgroups gc must find too.
	caller string
}

// outcome is what happened in one iteration.
type outcome struct {
	plan  killPlan
	stage stage
	res   result
	err   string // a failed expectation, empty when fine
}

// TestCrashConsistency starts `agentkernel run` crashRuns times and
// SIGKILLs agentkernel (or, in a quarter of the runs, the sandbox init it
// re-executed) at a random moment in the first maxKillDelay, then runs
// `agentkernel gc` and checks that no mount, cgroup, process, temporary
// file or lock is left and that the image cache still verifies.
func TestCrashConsistency(t *testing.T) {
	runs := crashRuns
	if s := os.Getenv("AK_CRASH_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("AK_CRASH_RUNS=%q", s)
		}
		runs = n
	}
	a := newAK(t)
	loadTestImage(t, a)
	inspectBefore := a.run(t, "images", "inspect", imageRef)
	if inspectBefore.code != 0 {
		t.Fatalf("images inspect: %v", inspectBefore)
	}
	layersBefore := treeDigest(t, filepath.Join(a.dataDir, "images", "layers"))
	// One clean run first: it also fills the seccomp filter cache, as
	// any real data dir has after its first run.
	if r := a.run(t, "run", "--image", imageRef, "--pull", "never", "--", "cat", markerFile); r.code != 0 || r.stdout != marker+"\n" {
		t.Fatalf("clean run: %v", r)
	}
	mountsBefore := readMounts(t)
	start := time.Now()
	// A mark in every sandbox's environment finds its processes in /proc,
	// whatever namespace they are in.
	mark := fmt.Sprintf("AK_CRASH_MARK=%d-%d", os.Getpid(), start.UnixNano())

	caller := callerCgroup(t)
	rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), 0x5eed))
	plans := make([]killPlan, runs)
	for i := range plans {
		// Setup takes only a few milliseconds: square a uniform number so
		// that about a third of the kills land before the command starts.
		u := rng.Float64()
		p := killPlan{i: i, delay: time.Duration(u * u * float64(maxKillDelay))}
		p.killInit = i%4 == 3
		p.parentToo = p.killInit && i%8 == 7
		if i%10 == 4 {
			p.caller = caller
		}
		plans[i] = p
	}
	t.Logf("seed %d", start.UnixNano())

	jobs := make(chan killPlan)
	results := make(chan outcome, runs)
	var wg sync.WaitGroup
	for w := 0; w < crashParallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range jobs {
				results <- killOne(a, mark, p)
			}
		}()
	}
	for _, p := range plans {
		jobs <- p
	}
	close(jobs)
	wg.Wait()
	close(results)
	lastRun := time.Now()

	var stages [numStages]int
	var initKills, failed, otherCaller int
	codes := map[string]int{}
	for o := range results {
		stages[o.stage]++
		if o.plan.caller != "" {
			otherCaller++
		}
		if o.plan.killInit {
			initKills++
			codes[fmt.Sprintf("%d/sig%d", o.res.code, int(o.res.signal))]++
		}
		if o.err != "" {
			failed++
			t.Errorf("run %d (%+v, killed at stage %s): %s\n%v", o.plan.i, o.plan, stageNames[o.stage], o.err, o.res)
		}
	}
	t.Logf("killed at: %s; agentkernel after its init was killed: %v (exit/signal)", formatStages(stages), codes)

	// Pdeathsig and the PID namespaces' teardown are asynchronous: give
	// the kernel a moment, then every process of ours must be gone.
	var leftovers []string
	procs := waitGone(func() []string { return ourProcesses(mark) }, 5*time.Second)
	leftovers = append(leftovers, procs...)

	// Cgroups of killed runs are empty but young: gc spares them for
	// cgroupGrace. Check the image cache while that passes.
	if r := a.run(t, "gc"); r.code != 0 || hasStackTrace(r.stderr) {
		t.Errorf("first gc: %v", r)
	}
	verifyCache(t, a, inspectBefore.stdout, layersBefore)
	if wait := time.Until(lastRun.Add(cgroupGrace + time.Second)); wait > 0 {
		t.Logf("waiting %v for gc's cgroup grace period", wait.Round(time.Second))
		time.Sleep(wait)
	}
	gc := a.run(t, "gc")
	if gc.code != 0 || hasStackTrace(gc.stderr) {
		t.Errorf("gc: %v", gc)
	}
	t.Logf("gc removed %d things", strings.Count(gc.stdout, "removed "))
	leftovers = append(leftovers, leftoverMounts(t, mountsBefore, a.dataDir, filepath.Dir(binary))...)
	leftovers = append(leftovers, waitGone(func() []string { return leftoverCgroups(start, lastRun, mark) }, time.Second)...)
	leftovers = append(leftovers, ourProcesses(mark)...)
	leftovers = append(leftovers, leftoverFiles(t, a.dataDir)...)
	for _, l := range leftovers {
		t.Errorf("left behind: %s", l)
	}
	// The cache must still work after gc too.
	verifyCache(t, a, inspectBefore.stdout, layersBefore)

	summary := fmt.Sprintf("crash: %d/%d runs killed (%d agentkernel, %d sandbox init, %d from another cgroup; at %s), %d leftovers",
		runs-failed, runs, runs-initKills, initKills, otherCaller, formatStages(stages), len(leftovers))
	fmt.Println(summary)
	t.Log(summary)
}

func formatStages(s [numStages]int) string {
	var parts []string
	for i, n := range s {
		parts = append(parts, fmt.Sprintf("%s %d", stageNames[i], n))
	}
	return strings.Join(parts, ", ")
}

// callerCgroup creates a child of this process's cgroup v1 memory
// cgroup for runs that play another caller, and removes it (and the
// "agentkernel" parent gc leaves in it) at the end. It returns "" when
// there is no v1 memory hierarchy.
func callerCgroup(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	own := ""
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && f[1] == "memory" {
			own = f[2]
		}
	}
	if own == "" {
		return ""
	}
	dir := filepath.Join("/sys/fs/cgroup/memory", own, fmt.Sprintf("ak-crash-caller-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Logf("no other-caller runs: %v", err)
		return ""
	}
	t.Cleanup(func() {
		_ = syscall.Rmdir(filepath.Join(dir, "agentkernel"))
		if err := syscall.Rmdir(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	return dir
}

// testImage is busybox plus a marker file.
func testImage(t *testing.T) v1.Image {
	t.Helper()
	return imagetest.Image(t, imagetest.BusyboxConfig(),
		imagetest.Layer(t, imagetest.BusyboxFiles(t)...),
		imagetest.Layer(t, imagetest.Reg(strings.TrimPrefix(markerFile, "/"), marker+"\n")))
}

// loadTestImage loads the test image from a docker-save tarball.
func loadTestImage(t *testing.T, a *ak) {
	t.Helper()
	tag, err := name.NewTag(imageRef)
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(t.TempDir(), "busybox.tar")
	if err := tarball.WriteToFile(tarPath, tag, testImage(t)); err != nil {
		t.Fatal(err)
	}
	if r := a.run(t, "-q", "images", "load", "-i", tarPath); r.code != 0 {
		t.Fatalf("images load: %v", r)
	}
}

// killOne starts one run and kills it as p says.
func killOne(a *ak, mark string, p killPlan) outcome {
	o := outcome{plan: p}
	args := []string{"run", "--image", imageRef, "--pull", "never", "-e", mark}
	args = append(args, "--", "sh", "-c", "sleep 0.2; echo done")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := a.cmd(ctx, args...)
	if p.caller != "" {
		// Join the caller's memory cgroup, then become agentkernel (same
		// pid, so the kill timing below is unchanged but for the shell).
		c.Path = "/bin/sh"
		c.Args = append([]string{"sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, p.caller}, c.Args...)
		c.Args[4] = binary
	}
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	begin := time.Now()
	if err := c.Start(); err != nil {
		o.err = err.Error()
		return o
	}
	pid := c.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	var werr error
	done := false

	if !p.killInit {
		select {
		case werr = <-exited:
			done = true
			o.stage = stageFinished
		case <-time.After(p.delay):
			o.stage = stageOf(pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	} else {
		// Wait for the init, then kill it after the random delay.
		initPid := 0
		for initPid == 0 && !done {
			select {
			case werr = <-exited:
				done = true
			case <-time.After(200 * time.Microsecond):
				initPid = initOf(pid)
			}
		}
		if done {
			o.err = "agentkernel exited before its sandbox init could be seen"
		} else {
			select {
			case werr = <-exited:
				done = true
				o.stage = stageFinished
			case <-time.After(p.delay):
				o.stage = stageOf(pid)
				_ = syscall.Kill(initPid, syscall.SIGKILL)
			}
			if p.parentToo && !done {
				time.Sleep(time.Duration(p.i%5) * time.Millisecond)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if !done {
		select {
		case werr = <-exited:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(pid, syscall.SIGKILL)
			werr = <-exited
			o.err = "agentkernel did not exit within 20s of the kill"
		}
	}
	o.res = finishQuiet(args, werr, out.String(), errb.String(), time.Since(begin))
	if o.err != "" {
		return o
	}
	switch {
	case hasStackTrace(o.res.stderr):
		o.err = "printed a Go stack trace"
	case p.killInit && !p.parentToo && o.stage != stageFinished && o.res.signal != 0:
		o.err = "agentkernel died of a signal after its sandbox init was killed"
	case p.killInit && !p.parentToo && o.stage != stageFinished && o.res.code == 0:
		o.err = "exit status 0 although the sandbox init was killed"
	case o.stage == stageFinished && (o.res.code != 0 || o.res.stdout != "done\n"):
		o.err = "a run that was not killed failed"
	}
	return o
}

func finishQuiet(args []string, err error, stdout, stderr string, took time.Duration) result {
	r := result{args: args, stdout: stdout, stderr: stderr, took: took}
	if ee, ok := err.(interface {
		ExitCode() int
		Sys() any
	}); ok {
		r.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.signal = ws.Signal()
		}
	} else if err != nil {
		r.code = -1
		r.stderr += "\n(wait: " + err.Error() + ")"
	}
	return r
}

// children lists the children of every thread of pid.
func children(pid int) []int {
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	var out []int
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// exeOf is the target of /proc/pid/exe ("" when unreadable).
func exeOf(pid int) string {
	s, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return s
}

// initOf returns the pid of agentkernel's sandbox init, or 0: its child
// running the agentkernel binary (a re-executed init), or the stub named
// agentkernel:init (a sandbox built on a thread of agentkernel, whose
// exec stage is then agentkernel's child too).
func initOf(pid int) int {
	for _, c := range children(pid) {
		if isBinary(exeOf(c)) {
			return c
		}
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(c) + "/cmdline"); bytes.HasPrefix(b, []byte("agentkernel:init\x00")) {
			return c
		}
	}
	return 0
}

// stageOf says how far the run of agentkernel process pid has got.
func stageOf(pid int) stage {
	in := initOf(pid)
	if in == 0 {
		return stageStarting
	}
	kids := children(in)
	for _, c := range children(pid) {
		if c != in {
			kids = append(kids, c)
		}
	}
	if len(kids) == 0 {
		return stageInit
	}
	for _, k := range kids {
		if e := exeOf(k); e != "" && !isAgentkernelExe(e) {
			return stageCommand
		}
	}
	return stageExecStage
}

// stubExe is /proc/<pid>/exe of the native backend's exec stage stub,
// which runs from a memfd (stub_linux.go) until it execs the command.
const stubExe = "/memfd:agentkernel-exec (deleted)"

// isAgentkernelExe reports whether exe (a /proc/<pid>/exe target) is the
// test's agentkernel binary or the exec stage stub.
func isAgentkernelExe(exe string) bool {
	return isBinary(exe) || exe == stubExe
}

// isBinary reports whether exe (a /proc/<pid>/exe target) is one of the
// test's agentkernel binaries: agentkernel, or agentkernel-full beside it.
func isBinary(exe string) bool {
	exe = strings.TrimSuffix(exe, " (deleted)")
	return exe == binary || exe == filepath.Join(filepath.Dir(binary), "agentkernel-full")
}

// ourProcesses lists live processes that run the test's agentkernel
// binary or carry the sandboxes' environment mark.
func ourProcesses(mark string) []string {
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	type proc struct {
		pid, ppid int
		desc, why string
	}
	procs := map[int]*proc{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue // gone
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 || f[0] == "Z" || f[0] == "X" {
			continue // dead, or a zombie some parent has yet to reap
		}
		ppid, _ := strconv.Atoi(f[1])
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		p := &proc{pid: pid, ppid: ppid, desc: fmt.Sprintf("process %d %q", pid, strings.ReplaceAll(string(cmdline), "\x00", " "))}
		procs[pid] = p
		if exe := exeOf(pid); isBinary(exe) {
			p.why = "runs the agentkernel binary"
			continue
		}
		env, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		if bytes.Contains(env, []byte(mark+"\x00")) || bytes.HasSuffix(env, []byte(mark)) {
			p.why = "runs in a test sandbox"
		}
	}
	// Descendants of ours are ours too (the exec stage stub has an empty
	// environment and runs from a memfd).
	var out []string
	for _, p := range procs {
		if p.why == "" {
			for q, n := procs[p.ppid], 0; q != nil && n < 64; q, n = procs[q.ppid], n+1 {
				if q.why != "" {
					p.why = "descends from " + q.desc
					break
				}
			}
		}
		if p.why != "" {
			out = append(out, p.desc+" "+p.why)
		}
	}
	sort.Strings(out)
	return out
}

// waitGone polls list until it is empty or d has passed.
func waitGone(list func() []string, d time.Duration) []string {
	deadline := time.Now().Add(d)
	for {
		l := list()
		if len(l) == 0 || time.Now().After(deadline) {
			return l
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	id, point, fstype, source, options, line string
}

func readMounts(t *testing.T) map[string]mountEntry {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]mountEntry{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		pre, post, ok := strings.Cut(line, " - ")
		fields, rest := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(rest) < 2 {
			continue
		}
		m := mountEntry{id: fields[0], point: unescapeMount(fields[4]), fstype: rest[0], source: rest[1], line: line}
		if len(rest) > 2 {
			m.options = rest[2]
		}
		out[m.id+" "+m.point] = m
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// leftoverMounts lists mounts that appeared since before and belong to
// the test's agentkernel: anything naming the data dir (a sandbox's
// overlay names its layers there) or the binary's directory, and any
// mount right on a scratch candidate. Mounts other tests on this machine
// make meanwhile name neither.
func leftoverMounts(t *testing.T, before map[string]mountEntry, dirs ...string) []string {
	var out []string
	for k, m := range readMounts(t) {
		if _, ok := before[k]; ok {
			continue
		}
		ours := false
		for _, d := range dirs {
			if strings.Contains(m.line, d) {
				ours = true
			}
		}
		for _, c := range scratchCandidates {
			if m.point == c {
				ours = true
			}
		}
		if ours {
			out = append(out, "mount "+m.line)
		}
	}
	sort.Strings(out)
	return out
}

// leftoverCgroups lists agentkernel-* cgroups (in every v1 hierarchy and
// the unified one) that hold a process of ours, or that are empty and
// were created while this test ran its runs (between start and end, when
// the last of them had ended). Non-empty cgroups of other agentkernel
// processes running on this machine at the same time, and cgroups made
// after our runs, are not ours to judge.
func leftoverCgroups(start, end time.Time, mark string) []string {
	ours := map[int]bool{}
	for _, p := range ourProcesses(mark) {
		var pid int
		if _, err := fmt.Sscanf(p, "process %d", &pid); err == nil {
			ours[pid] = true
		}
	}
	var out []string
	hier, _ := os.ReadDir("/sys/fs/cgroup")
	for _, h := range hier {
		root := filepath.Join("/sys/fs/cgroup", h.Name())
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if strings.Count(strings.TrimPrefix(p, root), "/") > 8 {
				return filepath.SkipDir
			}
			if !strings.HasPrefix(d.Name(), "agentkernel-") {
				return nil
			}
			fi, err := d.Info()
			if err != nil || fi.ModTime().Before(start.Add(-time.Second)) {
				return filepath.SkipDir
			}
			procs, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			pids := strings.Fields(string(procs))
			mine := len(pids) == 0 && !fi.ModTime().After(end.Add(time.Second))
			for _, s := range pids {
				if pid, err := strconv.Atoi(s); err == nil && ours[pid] {
					mine = true
				}
			}
			if mine {
				out = append(out, fmt.Sprintf("cgroup %s (created %s, procs %v)", p, fi.ModTime().Format(time.TimeOnly), pids))
			}
			return filepath.SkipDir
		})
	}
	return out
}

// permanentFiles are what a data dir holds for good after runs: the
// image store's own files and the seccomp filter cache.
var permanentFiles = []*regexp.Regexp{
	regexp.MustCompile(`^images$`),
	regexp.MustCompile(`^images/(store|index)\.json$`),
	regexp.MustCompile(`^images/(blobs|layers)(/sha256)?$`),
	regexp.MustCompile(`^images/blobs/sha256/[0-9a-f]{64}$`),
	regexp.MustCompile(`^images/layers/sha256/[0-9a-f]{64}$`),
	regexp.MustCompile(`^images/locks$`),
	regexp.MustCompile(`^images/locks/(index|gc|layer-[0-9a-f]{64})\.lock$`),
	regexp.MustCompile(`^images/tmp$`),
	regexp.MustCompile(`^cache(/seccomp)?$`),
	regexp.MustCompile(`^cache/seccomp/[0-9a-f]{8}-[0-9a-f]{32}\.bpf$`),
	regexp.MustCompile(`^runs$`),
}

// leftoverFiles lists files and directories under the data dir that are
// neither permanent nor a run kept on purpose (--keep that completed).
func leftoverFiles(t *testing.T, dataDir string) []string {
	var out []string
	err := filepath.WalkDir(dataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			out = append(out, fmt.Sprintf("unreadable %s: %v", p, err))
			return nil
		}
		rel, _ := filepath.Rel(dataDir, p)
		if rel == "." {
			return nil
		}
		if ok, _ := filepath.Match("images/layers/sha256/*", rel); ok && d.IsDir() {
			return filepath.SkipDir // a layer: checked by verifyCache
		}
		if ok, _ := filepath.Match("runs/*", rel); ok && d.IsDir() {
			if _, err := os.Stat(filepath.Join(p, "kept")); err == nil {
				return filepath.SkipDir // kept on purpose
			}
			out = append(out, "run directory "+p+" (not kept, owner dead)")
			return filepath.SkipDir
		}
		for _, re := range permanentFiles {
			if re.MatchString(rel) {
				return nil
			}
		}
		out = append(out, "file "+p)
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	return out
}

// treeDigest hashes every name, type, mode, owner, size, link target and
// content under dir.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %o %d:%d %d\n", rel, st.Mode, st.Uid, st.Gid, st.Size)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "-> %s\n", l)
		case d.Type().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("hashing %s: %v", dir, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// verifyCache checks the image is intact: the same inspect output, the
// same unpacked layers, and a run with --pull never works.
func verifyCache(t *testing.T, a *ak, inspect, layers string) {
	t.Helper()
	if r := a.run(t, "images", "inspect", imageRef); r.code != 0 || r.stdout != inspect {
		t.Errorf("images inspect changed:\nbefore: %s\nafter: %v", inspect, r)
	}
	if got := treeDigest(t, filepath.Join(a.dataDir, "images", "layers")); got != layers {
		t.Errorf("unpacked layers changed: digest %s, was %s", got, layers)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := a.cmd(ctx, "run", "--image", imageRef, "--pull", "never", "--", "cat", markerFile)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	r := finishQuiet(c.Args[1:], err, out.String(), errb.String(), 0)
	if r.code != 0 || r.stdout != marker+"\n" {
		t.Errorf("fresh run from the cache: %v", r)
	}
}

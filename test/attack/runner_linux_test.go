//go:build linux

package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Results of one probe run.
const (
	blocked = "blocked"
	allowed = "allowed"
	errored = "error"
	notApp  = "n-a"
)

// outcome is what one probe run came to.
type outcome struct {
	Probe   string `json:"probe"`
	Profile string `json:"profile"`
	Result  string `json:"result"`
	Detail  string `json:"detail"`
	// Judged is set when the runner, not the probe, decided Result from
	// what it saw on the host.
	Judged   bool          `json:"judged,omitempty"`
	ExitCode int           `json:"exit_code"`
	Err      string        `json:"err,omitempty"`
	Took     time.Duration `json:"took"`
}

// hostCheck is a check made from the host after the battery.
type hostCheck struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// NA: the check's target does not exist for this kind of user (its
	// probe's positive control found none).
	NA     bool   `json:"na,omitempty"`
	Detail string `json:"detail"`
}

// modeResults is one battery: every probe in every profile, as root or
// rootless.
type modeResults struct {
	Mode     string                         `json:"mode"`
	Outcomes map[string]map[string]*outcome `json:"outcomes"` // probe -> profile
	// Controls are the probes' positive controls for this battery's kind
	// of user (root and root-pool share root's).
	Controls map[string]*outcome `json:"controls"`
	Checks   []hostCheck         `json:"checks"`
	Warnings []string            `json:"warnings,omitempty"`
	Took     time.Duration       `json:"took"`
}

// runner runs probes in sandboxes through one backend: native unless
// the battery is another backend's (backends_linux_test.go).
type runner struct {
	f       *fixtures
	backend sandbox.Backend
	// other is the backend under test when it is not native.
	other *backendUnderTest
	// prepared runs each probe the way a warm pool does (Prepare, then
	// Run with the command and its stdio), where the spec allows it.
	prepared bool

	mu       sync.Mutex
	warnings map[string]bool
	cowBad   []string // copy-on-write workspaces that changed on the host
	setid    []string // set-id files or file capabilities found in host workspaces
	foreign  []string // files in host workspaces owned by other host users
}

// invoker is the host user a sandbox's root stands for in writable host
// directories: sudo's user, else this process's.
func invoker() (uid, gid int) {
	uid, gid = os.Getuid(), os.Getgid()
	if uid == 0 {
		if u, err := strconv.Atoi(os.Getenv("SUDO_UID")); err == nil && u > 0 {
			uid = u
		}
		if g, err := strconv.Atoi(os.Getenv("SUDO_GID")); err == nil && g > 0 {
			gid = g
		}
	}
	return uid, gid
}

// Host id blocks: a root caller's sandbox runs in a block of idBlockSize
// host ids at or above minSandboxID (systemd's container range), clear of
// every range delegated in /etc/subuid and /etc/subgid.
const (
	minSandboxID = 524288
	idBlockSize  = 65536
)

// blockProblem says why ids cannot all be of one sandbox's block of host
// ids (at or above minSandboxID, within idBlockSize of each other,
// clear of every delegated range), or "" when they can.
func blockProblem(ids []uint32) string {
	if len(ids) == 0 {
		return ""
	}
	lo, hi := ids[0], ids[0]
	for _, id := range ids {
		lo, hi = min(lo, id), max(hi, id)
	}
	switch {
	case lo < minSandboxID:
		return fmt.Sprintf("host id %d is below the sandboxes' range (%d)", lo, minSandboxID)
	case hi-lo >= idBlockSize:
		return fmt.Sprintf("host ids %d and %d cannot be of one sandbox's block of %d", lo, hi, idBlockSize)
	}
	for _, r := range readDelegated() {
		if int(hi) >= r[0] && int(lo) < r[0]+r[1] {
			return fmt.Sprintf("host ids %d-%d overlap the delegated range %d-%d", lo, hi, r[0], r[0]+r[1]-1)
		}
	}
	return ""
}

// scanWorkspace looks at every file under dir, a writable host
// directory a sandbox had: setid lists those that are set-user-ID,
// set-group-ID or carry a security.capability xattr, with their host
// owner; foreign those owned by anyone but the invoking user (invoker),
// root (whose the fixtures are) and, as root, the ids of one sandbox's
// block (blockProblem): all the other owners of this directory's files
// must fit in one block, the sandbox's. Rootless, the caller is the only
// owner a sandbox can give. A directory that cannot be walked, or holds
// nothing, is reported in foreign: a scan that saw nothing proves
// nothing.
func scanWorkspace(dir string) (setid, foreign []string) {
	uid, gid := invoker()
	root := os.Geteuid() == 0
	var blockIDs []uint32
	var blockFiles []string
	scanned := 0
	walkErr := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			foreign = append(foreign, fmt.Sprintf("%s: cannot scan: %v", p, err))
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			foreign = append(foreign, fmt.Sprintf("%s: cannot stat: %v", p, err))
			return nil
		}
		if p != dir {
			scanned++
		}
		if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 && st.Mode&unix.S_IFMT == unix.S_IFREG {
			setid = append(setid, fmt.Sprintf("%s mode %o owner %d:%d", p, st.Mode&0o7777, st.Uid, st.Gid))
		}
		if n, err := unix.Lgetxattr(p, "security.capability", nil); err == nil && n > 0 {
			setid = append(setid, fmt.Sprintf("%s has security.capability (owner %d)", p, st.Uid))
		}
		for _, id := range [2]struct {
			id   uint32
			mine int
		}{{st.Uid, uid}, {st.Gid, gid}} {
			switch {
			case int(id.id) == id.mine || (root && id.id == 0):
			case root:
				blockIDs = append(blockIDs, id.id)
				blockFiles = append(blockFiles, fmt.Sprintf("%s owner %d:%d", p, st.Uid, st.Gid))
			default:
				foreign = append(foreign, fmt.Sprintf("%s owner %d:%d", p, st.Uid, st.Gid))
			}
		}
		return nil
	})
	if walkErr != nil {
		foreign = append(foreign, fmt.Sprintf("%s: cannot scan: %v", dir, walkErr))
	}
	if scanned == 0 {
		foreign = append(foreign, dir+": scanned nothing (the fixtures put a README there): the scan proves nothing")
	}
	if p := blockProblem(blockIDs); p != "" {
		foreign = append(foreign, p+": "+strings.Join(blockFiles, ", "))
	}
	return setid, foreign
}

// writableWorkspace is the host directory spec binds writable at
// /workspace, or "".
func writableWorkspace(spec *sandbox.Spec) string {
	for _, m := range spec.Mounts {
		if m.Kind == sandbox.MountBind && !m.ReadOnly && m.Dest == policy.WorkspaceDir {
			return m.Source
		}
	}
	return ""
}

// chownIDs are the ids the workspace_chown probe gives its files
// (attack-chown-<id>), in its order.
var chownIDs = []int{1000, 1001, 65534, 0}

// judgeChown judges workspace_chown by the host owners of the files it
// left in ws, a writable host workspace. As root the sandbox's root
// stands for the invoking user, and every other id for the same id of
// the sandbox's block: attack-chown-0 must be the invoking user's, and
// attack-chown-1000, -1001 and -65534 host ids B+1000, B+1001, B+65534 of
// one block B (blockProblem). Rootless every file is the caller's. A file
// missing is an error: the probe did not do what it says.
func judgeChown(ws string, rootless bool) (result, detail string) {
	uid, gid := invoker()
	var bad, seen []string
	base := int64(-1)
	for _, id := range chownIDs {
		p := filepath.Join(ws, fmt.Sprintf("attack-chown-%d", id))
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return errored, fmt.Sprintf("the probe left no %s: %v", filepath.Base(p), err)
		}
		seen = append(seen, fmt.Sprintf("%d→%d:%d", id, st.Uid, st.Gid))
		if rootless || id == 0 {
			if int(st.Uid) != uid || int(st.Gid) != gid {
				bad = append(bad, fmt.Sprintf("%s is host %d:%d, not the invoking user's %d:%d", filepath.Base(p), st.Uid, st.Gid, uid, gid))
			}
			continue
		}
		b := int64(st.Uid) - int64(id)
		if base < 0 {
			base = b
		}
		if b != base || int64(st.Gid)-int64(id) != base {
			bad = append(bad, fmt.Sprintf("%s is host %d:%d, not %d:%d of the sandbox's block", filepath.Base(p), st.Uid, st.Gid, base+int64(id), base+int64(id)))
		}
	}
	if !rootless && base >= 0 {
		if p := blockProblem([]uint32{uint32(base), uint32(base + idBlockSize - 1)}); p != "" {
			bad = append(bad, "the sandbox's block: "+p)
		}
	}
	if len(bad) > 0 {
		return allowed, "files in the host workspace belong to other host users: " + strings.Join(bad, "; ")
	}
	return blocked, "host owners (inside→host): " + strings.Join(seen, ", ")
}

// runSpec runs spec as a direct run, or in the prepared mode as a pooled
// one (falling back to a direct run where a pool would: a terminal, a
// kept layer, an environment too large for the stub).
func (r *runner) runSpec(ctx context.Context, spec *sandbox.Spec, stdio sandbox.Stdio) (sandbox.Result, error) {
	pr, ok := r.backend.(sandbox.Preparer)
	if !r.prepared || !ok || spec.TTY || spec.Keep {
		return r.backend.Run(ctx, spec, stdio)
	}
	p, err := pr.Prepare(ctx, spec)
	if errors.Is(err, sandbox.ErrUnsupported) {
		return r.backend.Run(ctx, spec, stdio)
	}
	if err != nil {
		return sandbox.Result{}, err
	}
	res, err := p.Run(ctx, spec.Args, stdio, nil)
	if errors.Is(err, sandbox.ErrUnsupported) {
		// An argv too large for one message: nothing ran.
		return r.backend.Run(ctx, spec, stdio)
	}
	return res, err
}

func newRunner(f *fixtures) *runner {
	r := &runner{f: f, warnings: map[string]bool{}, other: f.other}
	if r.other != nil {
		r.backend = r.other.new(r)
		return r
	}
	r.backend = native.New(native.Options{
		DataDir:   f.dataDir,
		NetHelper: netHelper,
		// The battery tries escapes, not limits: where the host delegates
		// no cgroup to the rootless battery's user, its runs go without
		// limits (one warning) instead of being refused.
		AllowDegraded: func() []string { return []string{config.DegradeCgroups} },
		Warn: func(s string) {
			r.mu.Lock()
			r.warnings[s] = true
			r.mu.Unlock()
		},
	})
	return r
}

// probeEnv is what every probe gets: the targets to aim at.
func (r *runner) probeEnv() []string {
	f := r.f
	return []string{
		"ATTACK_TOKEN=" + f.token,
		"ATTACK_HOST_CANARY=" + f.hostCanary,
		"ATTACK_HOME_CANARY=" + f.homeCanary,
		"ATTACK_DATA_DIR=" + f.dataDir,
		"ATTACK_SHADOW_SHA256=" + f.shadowSum,
		"ATTACK_LAYER_DIR=" + f.layers[0],
		"ATTACK_OTHER_SECRET=" + f.otherSecret,
		"ATTACK_OTHER_TOKEN=" + f.otherToken,
		"ATTACK_OTHER_UPPER=" + firstField(f.otherUpper),
		"ATTACK_HOST_PID=" + strconv.Itoa(f.victim.Process.Pid),
		"ATTACK_VICTIM_TOKEN=" + f.victimToken,
		"ATTACK_NET_TOKEN=" + f.netToken,
		"ATTACK_HOST_PORT=" + strconv.Itoa(f.tcpPort),
		"ATTACK_HOST_UDP_PORT=" + strconv.Itoa(f.udpPort),
		"ATTACK_HOST_IPS=" + strings.Join(f.hostIPs, " "),
		"ATTACK_ABSTRACT=" + f.abstract,
		"ATTACK_UNIX_PATH=" + f.unixPath,
		"ATTACK_SHM_KEY=" + strconv.Itoa(f.shmKey),
		"ATTACK_PROC_CAP=5000",
		"ATTACK_MEM_CAP_MB=3072",
		"ATTACK_DISK_CAP_MB=2048",
	}
}

func firstField(s string) string {
	if fs := strings.Fields(s); len(fs) > 0 {
		return fs[0]
	}
	return ""
}

// spec resolves the profile through policy.Resolve, as `agentkernel run`
// does, with the test image and a workspace of its own for this run.
//
// Network: every profile runs with --no-network, so that the network
// probes check that loopback-only really is all a sandbox gets, except
// in the egress battery (modeEgress), where every profile runs with
// --network full.
func (r *runner) spec(profile, probe string) *sandbox.Spec {
	ws := filepath.Join(r.f.tmp, "ws", profile+"-"+probe)
	_ = os.MkdirAll(ws, 0o755)
	_ = os.WriteFile(filepath.Join(ws, "README"), []byte("project file\n"), 0o644)
	spec, _, err := policy.Resolve(policy.Input{
		Overrides: policy.Overrides{
			Profile:   profile,
			Image:     "attack-probes:test",
			NoNetwork: r.f.mode != modeEgress,
			Network:   egressSetting(r.f.mode),
			Env:       r.probeEnv(),
			Hostname:  "attack",
		},
		Args:    []string{"/probes/" + probe},
		Cwd:     ws,
		HomeDir: r.f.homeDir,
		HostEnv: func(string) (string, bool) { return "", false },
	})
	if err != nil {
		panic(fmt.Sprintf("policy.Resolve(%s): %v", profile, err))
	}
	spec.Rootfs = image.Rootfs{Ref: "attack-probes:test", Layers: r.f.layers}
	if r.other != nil {
		r.other.adjust(r, spec)
	}
	// An outer bound: no probe needs a minute.
	spec.Resources.Timeout = time.Minute
	return spec
}

// tailWriter keeps the last max bytes written and counts them all.
type tailWriter struct {
	mu    sync.Mutex
	max   int
	buf   []byte
	total int64
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.total += int64(len(p))
	w.buf = append(w.buf, p...)
	if len(w.buf) > 2*w.max {
		w.buf = append(w.buf[:0], w.buf[len(w.buf)-w.max:]...)
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}

func stdioDiscard() sandbox.Stdio {
	return sandbox.Stdio{Stdin: bytes.NewReader(nil), Stdout: io.Discard, Stderr: io.Discard}
}

// report is the one JSON line a probe prints.
type report struct {
	Probe  string `json:"probe"`
	Result string `json:"result"`
	Detail string `json:"detail"`
}

// parseReport finds the probe's report: the last line that parses.
func parseReport(out string) (report, bool) {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, `{"probe":`) {
			continue
		}
		var rep report
		if json.Unmarshal([]byte(l), &rep) == nil {
			return rep, true
		}
	}
	return report{}, false
}

// run runs one probe in one profile and judges the outcome.
func (r *runner) run(ctx context.Context, profile, probe string) *outcome {
	spec := r.spec(profile, probe)
	stdout := &tailWriter{max: 64 << 10}
	stderr := &tailWriter{max: 8 << 10}
	stdio := sandbox.Stdio{Stdin: bytes.NewReader(nil), Stdout: stdout, Stderr: stderr}
	o := &outcome{Probe: probe, Profile: profile}

	var cowBefore string
	cow := false
	for _, m := range spec.Mounts {
		if m.Kind == sandbox.MountCopyOnWrite && m.Dest == policy.WorkspaceDir {
			cow = true
			cowBefore, _ = treeHash(m.Source)
		}
	}

	// Per-probe set-up and the host-side judges.
	var judge func(res sandbox.Result, err error, took time.Duration)
	switch probe {
	case "setuid_nnp":
		spec.User = "1000:1000"
		judge = func(res sandbox.Result, err error, took time.Duration) {
			if err != nil && r.f.mode == "rootless" && strings.Contains(err.Error(), "invalid argument") {
				o.Judged = true
				o.Result, o.Detail = notApp, "uid 1000 is not mapped in a rootless sandbox: "+err.Error()
			}
		}
	case "sigterm_ignore":
		spec.Resources.Timeout = 2 * time.Second
		judge = func(res sandbox.Result, err error, took time.Duration) {
			left := r.f.ourProcs("/probes/sigterm_ignore")
			o.Judged = true
			switch {
			case err != nil:
				o.Result, o.Detail = errored, "run failed: "+err.Error()
			case res.TimedOut && took < 12*time.Second && len(left) == 0:
				o.Result = blocked
				o.Detail = fmt.Sprintf("the 2s timeout ended the sandbox after %v (exit %d); nothing left running", took.Round(time.Millisecond), res.ExitCode)
			default:
				o.Result = allowed
				o.Detail = fmt.Sprintf("timed out=%v after %v; left running: %v", res.TimedOut, took.Round(time.Millisecond), left)
			}
		}
	case "huge_env_argv":
		// 64 MiB of argv: far beyond ARG_MAX. agentkernel must refuse
		// cleanly and promptly.
		arg := strings.Repeat("A", 128<<10-1)
		for i := 0; i < 512; i++ {
			spec.Args = append(spec.Args, arg)
		}
		for i := 0; i < 256; i++ {
			spec.Env = append(spec.Env, fmt.Sprintf("ATTACK_BIG_%d=%s", i, arg))
		}
		// Promptly is judged by the work agentkernel does (its own CPU
		// time: heavy probes run alone), with a wall-clock bound well
		// inside the sandbox's minute for a hang; wall time alone
		// measures the machine's load.
		cpuBefore := selfCPU()
		judge = func(res sandbox.Result, err error, took time.Duration) {
			o.Judged = true
			cpu := selfCPU() - cpuBefore
			switch {
			case cpu > 10*time.Second:
				o.Result, o.Detail = allowed, fmt.Sprintf("agentkernel spent %v of CPU time (%v in all) on the oversized argv", cpu.Round(time.Millisecond), took.Round(time.Millisecond))
			case took > 45*time.Second:
				o.Result, o.Detail = allowed, fmt.Sprintf("agentkernel took %v to answer (%v of CPU time)", took.Round(time.Millisecond), cpu.Round(time.Millisecond))
			case err != nil:
				o.Result, o.Detail = blocked, fmt.Sprintf("refused cleanly in %v (%v of CPU time): %v", took.Round(time.Millisecond), cpu.Round(time.Microsecond), err)
			case res.ExitCode != 0:
				o.Result, o.Detail = blocked, fmt.Sprintf("refused cleanly in %v (%v of CPU time): exit %d", took.Round(time.Millisecond), cpu.Round(time.Microsecond), res.ExitCode)
			default:
				o.Result, o.Detail = allowed, "64 MiB of argv reached the command: "+o.Detail
			}
			// Not a defence but worth knowing: does a large argv that the
			// kernel would accept (1 MiB, under ARG_MAX) get through?
			small := r.spec(profile, probe)
			for i := 0; i < 8; i++ {
				small.Args = append(small.Args, arg)
			}
			var out tailWriter
			out.max = 4 << 10
			sres, serr := r.backend.Run(ctx, small, sandbox.Stdio{Stdin: bytes.NewReader(nil), Stdout: &out, Stderr: &out})
			if rep, ok := parseReport(out.String()); ok {
				o.Detail += "; 1 MiB of argv: " + rep.Detail
			} else {
				o.Detail += fmt.Sprintf("; 1 MiB of argv (under ARG_MAX) was refused too: exit %d, %v", sres.ExitCode, serr)
			}
		}
	case "output_flood":
		stdout.max = 4 << 10
		_ = resetPeakRSS()
		_, rssBefore := peakRSS()
		judge = func(res sandbox.Result, err error, took time.Duration) {
			hwm, _ := peakRSS()
			growth := hwm - rssBefore
			o.Judged = true
			detail := fmt.Sprintf("forwarded %d MiB in %v; agentkernel peak RSS grew %d MiB", stdout.total>>20, took.Round(time.Millisecond), growth>>20)
			switch {
			case err != nil:
				o.Result, o.Detail = errored, "run failed: "+err.Error()
			case stdout.total < 1<<30:
				o.Result, o.Detail = errored, "the flood did not arrive whole: "+detail
			case growth < 100<<20:
				o.Result, o.Detail = blocked, detail
			default:
				o.Result, o.Detail = allowed, detail
			}
		}
	case "workspace_chown":
		// The probe cannot see host owners; the runner judges them.
		if ws := writableWorkspace(spec); ws != "" {
			judge = func(res sandbox.Result, err error, took time.Duration) {
				if o.Result != blocked {
					return
				}
				o.Judged = true
				var d string
				o.Result, d = judgeChown(ws, r.f.mode == "rootless")
				o.Detail = d + "; the probe: " + o.Detail
			}
		}
	case "tiocsti":
		master, slave, err := openHostPTY()
		if err != nil {
			o.Result, o.Detail = errored, "no host pty: "+err.Error()
			return o
		}
		defer master.Close()
		defer slave.Close()
		stdio.Stdin = slave
		judge = func(res sandbox.Result, err error, took time.Duration) {
			n, _ := unix.IoctlGetInt(int(slave.Fd()), unix.TIOCINQ)
			if n > 0 {
				o.Judged = true
				o.Result, o.Detail = allowed, fmt.Sprintf("%d bytes injected into the host terminal's input queue; %s", n, o.Detail)
			}
		}
	}

	start := time.Now()
	res, err := r.runSpec(ctx, spec, stdio)
	o.Took = time.Since(start)
	o.ExitCode = res.ExitCode
	if err != nil {
		o.Err = err.Error()
	}
	if rep, ok := parseReport(stdout.String()); ok {
		o.Result, o.Detail = rep.Result, rep.Detail
		if rep.Probe != probe {
			o.Result, o.Detail = errored, "report names "+rep.Probe
		}
	} else {
		switch {
		case err != nil:
			o.Result, o.Detail = errored, "run failed: "+err.Error()
		case res.Signal == int(unix.SIGKILL) && (probe == "memory_bomb" || probe == "disk_fill" || probe == "fork_bomb"):
			o.Judged = true
			o.Result, o.Detail = blocked, "the sandbox's limit killed the probe (SIGKILL) before the cap"
		default:
			o.Result = errored
			o.Detail = fmt.Sprintf("no report; exit %d; stderr: %s", res.ExitCode, lastLines(stderr.String(), 3))
		}
	}
	if judge != nil {
		judge(res, err, o.Took)
	}
	for _, m := range spec.Mounts {
		if m.Kind == sandbox.MountBind && !m.ReadOnly {
			setid, foreign := scanWorkspace(m.Source)
			r.mu.Lock()
			if len(setid) > 0 {
				r.setid = append(r.setid, fmt.Sprintf("%s/%s: %v", profile, probe, setid))
			}
			if len(foreign) > 0 {
				r.foreign = append(r.foreign, fmt.Sprintf("%s/%s: %v", profile, probe, foreign))
			}
			r.mu.Unlock()
		}
	}
	if cow {
		m := spec.Mounts[0]
		for _, mm := range spec.Mounts {
			if mm.Dest == policy.WorkspaceDir {
				m = mm
			}
		}
		if after, _ := treeHash(m.Source); after != cowBefore {
			r.mu.Lock()
			r.cowBad = append(r.cowBad, fmt.Sprintf("%s/%s: %v", profile, probe, treeList(m.Source)))
			r.mu.Unlock()
		}
	}
	return o
}

// selfCPU is the user and system CPU time this process has used.
func selfCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// battery runs every probe's positive control on the host (unless ctrls,
// the controls of the same kind of user, are given), then every probe in
// every profile, and then the host checks.
func battery(t *testing.T, mode, probesBin string, ctrls map[string]*outcome) *modeResults {
	t.Helper()
	return batteryOn(t, mode, probesBin, ctrls, nil)
}

// batteryOn is battery through other, a backend other than native (its
// name is the battery's mode; it runs as root), or native when nil.
func batteryOn(t *testing.T, mode, probesBin string, ctrls map[string]*outcome, other *backendUnderTest) *modeResults {
	t.Helper()
	start := time.Now()
	f := newFixtures(t, mode, probesBin)
	f.other = other
	r := newRunner(f)
	r.prepared = mode == modePool
	f.startOtherSandbox(t, r)

	layersBefore := map[string]string{}
	for _, l := range f.layers {
		h, err := treeHash(l)
		must(t, err)
		layersBefore[l] = h
	}
	homeBefore, _ := treeHash(f.homeDir)
	canaryBefore, _ := os.ReadFile(f.hostCanary)
	hostname, _ := os.Hostname()
	corePattern, _ := os.ReadFile("/proc/sys/kernel/core_pattern")

	probes := listProbes(t, probesBin)
	res := &modeResults{Mode: mode, Outcomes: map[string]map[string]*outcome{}}
	for _, p := range probes {
		res.Outcomes[p] = map[string]*outcome{}
	}
	// Positive controls first: each probe shows that its target is there
	// and reachable outside a sandbox, as this kind of user. They have a
	// bound of their own, outside the probes'.
	if ctrls == nil {
		cstart := time.Now()
		cctx, ccancel := context.WithTimeout(context.Background(), 90*time.Second)
		ctrls = r.runControls(cctx, probes)
		ccancel()
		t.Logf("%s: positive controls: %v", mode, time.Since(cstart).Round(time.Millisecond))
	}
	res.Controls = ctrls

	// An outer bound on the probes: on a loaded machine the battery can
	// take minutes, and a run started after the bound is killed at once.
	// The other backends start a sandbox more slowly (an engine's API, a
	// runsc): twice the bound.
	bound := 240 * time.Second
	if other != nil {
		bound *= 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()

	type job struct{ profile, probe string }
	var light, heavyJobs []job
	for _, p := range probes {
		for _, prof := range profiles {
			if probeTable[p].Heavy {
				heavyJobs = append(heavyJobs, job{prof, p})
			} else {
				light = append(light, job{prof, p})
			}
		}
	}
	var mu sync.Mutex
	runAll := func(jobs []job, workers int) {
		ch := make(chan job)
		var wg sync.WaitGroup
		for i := 0; i < workers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range ch {
					var o *outcome
					if ctx.Err() != nil {
						o = &outcome{Probe: j.probe, Profile: j.profile, Result: errored,
							Detail: "not run: the battery's outer bound ran out first (a loaded machine?)"}
					} else {
						o = r.run(ctx, j.profile, j.probe)
					}
					mu.Lock()
					res.Outcomes[j.probe][j.profile] = o
					mu.Unlock()
				}
			}()
		}
		for _, j := range jobs {
			ch <- j
		}
		close(ch)
		wg.Wait()
	}
	runAll(light, 4)
	runAll(heavyJobs, 1)

	// Host checks: what must be unchanged after all of the above.
	check := func(name string, ok bool, detail string) {
		res.Checks = append(res.Checks, hostCheck{Name: name, OK: ok, Detail: detail})
	}
	var changed []string
	for _, l := range f.layers {
		if h, err := treeHash(l); err != nil || h != layersBefore[l] {
			changed = append(changed, fmt.Sprintf("%s (%v)", l, err))
		}
	}
	check("image layers unchanged", len(changed) == 0, orNone(changed, "tree hashes of both layer directories equal before and after"))
	homeAfter, _ := treeHash(f.homeDir)
	check("host $HOME unchanged", homeAfter == homeBefore, "tree hash of the fake $HOME")
	canaryAfter, _ := os.ReadFile(f.hostCanary)
	check("host canary unchanged", bytes.Equal(canaryBefore, canaryAfter), f.hostCanary)
	check("host victim process alive", f.victimAlive(), fmt.Sprintf("pid %d, argv[0] %s", f.victim.Process.Pid, f.victimToken))
	h2, _ := os.Hostname()
	check("host hostname unchanged", h2 == hostname, h2)
	cp2, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	check("host core_pattern unchanged", bytes.Equal(cp2, corePattern), strings.TrimSpace(string(cp2)))
	r.mu.Lock()
	check("copy-on-write workspaces unchanged on the host", len(r.cowBad) == 0, orNone(r.cowBad, "every moderate run's project directory hashed the same before and after"))
	check("no set-id file or file capability reaches a host workspace", len(r.setid) == 0, orNone(r.setid, "every permissive run's project directory scanned"))
	check("no file in a host workspace belongs to another host user", len(r.foreign) == 0, orNone(r.foreign, "every permissive run's project directory scanned: owners are the invoking user, root (the fixtures') or a sandbox's own block of ids"))
	for w := range r.warnings {
		res.Warnings = append(res.Warnings, w)
	}
	r.mu.Unlock()
	if mode != modeEgress {
		// Filesystem checks: the egress battery runs only the network
		// probes, and the other batteries make these. The host image
		// is native's alone (the other backends refuse it).
		res.Checks = append(res.Checks, imageSymlinkChecks(t, r)...)
		if other == nil {
			res.Checks = append(res.Checks, hostImageChecks(t, r, ctrls)...)
		}
	}
	// Processes of a sandbox whose Run returned may take a moment to be
	// reaped by the kernel; anything still there after 5 s was left behind.
	// Only this battery's processes count (its token is in their
	// environment): another battery on this machine is not ours to judge.
	left := f.ourProcs("")
	for i := 0; i < 50 && len(left) > 0; i++ {
		time.Sleep(100 * time.Millisecond)
		left = f.ourProcs("")
	}
	check("no probe process left on the host", len(left) == 0, orNone(describeProcs(left), "none of this battery's probes, controls or sandbox commands"))
	res.Took = time.Since(start)
	return res
}

// describeProcs adds state, parent and cgroup to ourProcs' entries.
func describeProcs(list []string) []string {
	var out []string
	for _, e := range list {
		pid, _, _ := strings.Cut(e, ":")
		st, _ := os.ReadFile("/proc/" + pid + "/status")
		var keep []string
		for _, l := range strings.Split(string(st), "\n") {
			for _, k := range []string{"State:", "PPid:", "NSpid:", "VmRSS:"} {
				if strings.HasPrefix(l, k) {
					keep = append(keep, strings.Join(strings.Fields(l), " "))
				}
			}
		}
		cg, _ := os.ReadFile("/proc/" + pid + "/cgroup")
		out = append(out, fmt.Sprintf("%s [%s] cgroup %s", e, strings.Join(keep, ", "), strings.ReplaceAll(strings.TrimSpace(string(cg)), "\n", " ")))
	}
	return out
}

func orNone(list []string, none string) string {
	if len(list) == 0 {
		return none
	}
	return strings.Join(list, "; ")
}

// profiles are the columns of the battery.
var profiles = []string{"permissive", "moderate", "restrictive"}

func listProbes(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	must(t, err)
	only := map[string]bool{}
	for _, p := range strings.Split(os.Getenv("ATTACK_ONLY"), ",") {
		if p != "" {
			only[p] = true
		}
	}
	var out []string
	for _, e := range ents {
		if len(only) == 0 || only[e.Name()] {
			out = append(out, e.Name())
		}
	}
	return out
}

// errRootless marks a rootless variant that cannot run on this machine.
var errRootless = errors.New("rootless variant unavailable")

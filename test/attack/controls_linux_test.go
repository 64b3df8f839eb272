//go:build linux

package attack

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Results of a probe's positive control (probes/internal/probe).
const (
	reachable   = "reachable"
	unreachable = "unreachable"
	// controlEnv makes a probe run its positive control.
	controlEnv = "ATTACK_CONTROL"
)

// runControls runs every probe's positive control on the host, outside
// any sandbox, as this process's user (root for the root batteries, the
// test user for the rootless one), several at a time.
func (r *runner) runControls(ctx context.Context, probes []string) map[string]*outcome {
	out := map[string]*outcome{}
	var mu sync.Mutex
	ch := make(chan string)
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range ch {
				o := r.control(ctx, p)
				mu.Lock()
				out[p] = o
				mu.Unlock()
			}
		}()
	}
	for _, p := range probes {
		ch <- p
	}
	close(ch)
	wg.Wait()
	return out
}

// control runs one probe's positive control: the probe's binary on the
// host, with the battery's targets in its environment, ATTACK_CONTROL=1,
// and a working and temporary directory of its own.
func (r *runner) control(ctx context.Context, probe string) *outcome {
	o := &outcome{Probe: probe}
	dir := filepath.Join(r.f.tmp, "control", probe)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		o.Result, o.Detail = errored, err.Error()
		return o
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(r.f.probesDir, probe))
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir, controlEnv + "=1"}, r.probeEnv()...)
	stdout := &tailWriter{max: 64 << 10}
	stderr := &tailWriter{max: 8 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Its own process group, ended whole at the deadline.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	o.Took = time.Since(start)
	if cmd.ProcessState != nil {
		o.ExitCode = cmd.ProcessState.ExitCode()
	}
	if err != nil {
		o.Err = err.Error()
	}
	rep, ok := parseReport(stdout.String())
	switch {
	case !ok:
		o.Result, o.Detail = errored, fmt.Sprintf("no report (%v); stderr: %s", err, lastLines(stderr.String(), 3))
	case rep.Probe != probe:
		o.Result, o.Detail = errored, "report names "+rep.Probe
	default:
		o.Result, o.Detail = rep.Result, rep.Detail
	}
	return o
}

// controlProblem says what is wrong with a probe's control, run as kind
// of user, or "" when it showed the target reachable, or not applicable
// where and for a reason that probeTable declares.
func controlProblem(ctrl *outcome, kind string) string {
	switch {
	case ctrl == nil:
		return "the positive control did not run"
	case ctrl.Result == reachable:
		return ""
	case ctrl.Result == notApp:
		return naProblem(ctrl.Probe, kind, ctrl.Detail)
	case ctrl.Result == unreachable:
		return "the positive control cannot reach the target outside a sandbox, so the probe cannot tell a defence from its own failure (the probe is broken): " + ctrl.Detail
	default:
		return fmt.Sprintf("the positive control ended %q: %s [exit %d, err %q]", ctrl.Result, ctrl.Detail, ctrl.ExitCode, ctrl.Err)
	}
}

// verdict judges one sandbox outcome by the expectation table and the
// probe's positive control in this battery kind. It returns the cell for
// RESULTS.md and whether the outcome is as expected. A "blocked" counts
// as a defence only where the control reached the target; where the
// control found no target, "blocked" (or the probe's own "n-a") is "n-a".
func verdict(probe, profile, mode string, o, ctrl *outcome) (cell string, ok bool) {
	want, _ := expected(probe, profile, mode)
	if p := controlProblem(ctrl, kindOf(mode)); p != "" {
		return "**FAIL: control " + ctrlResult(ctrl) + "**", false
	}
	if ctrl.Result == notApp && (o.Result == blocked || o.Result == notApp) {
		return notApp, true
	}
	switch {
	case o.Result != want:
		return "**FAIL: " + o.Result + "**", false
	case o.Result != blocked:
		return o.Result + " ✓", true
	default:
		return o.Result, true
	}
}

func ctrlResult(ctrl *outcome) string {
	if ctrl == nil {
		return "missing"
	}
	return ctrl.Result
}

// procInfo is a live host process.
type procInfo struct {
	pid     int
	cmdline string
	environ []byte
	pidNS   string
}

// hostProcs lists the live (not zombie) host processes this process may
// inspect.
func hostProcs() []procInfo {
	ents, _ := os.ReadDir("/proc")
	var out []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || len(stat) < i+3 || stat[i+2] == 'Z' || stat[i+2] == 'X' {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		env, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		ns, _ := os.Readlink("/proc/" + e.Name() + "/ns/pid")
		out = append(out, procInfo{pid: pid, cmdline: strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " "), environ: env, pidNS: ns})
	}
	return out
}

// ourProcs lists live host processes that this battery started and that
// run something whose command line contains s: those whose environment
// carries the battery's token (every probe, control and sandbox command
// gets it as ATTACK_TOKEN), less the long-running other sandbox's. Other
// batteries on this machine, and everything else, have other tokens or
// none.
func (f *fixtures) ourProcs(s string) []string {
	mark := []byte("ATTACK_TOKEN=" + f.token + "\x00")
	procs := hostProcs()
	otherNS := ""
	if f.otherPID > 0 {
		otherNS, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", f.otherPID))
	}
	var out []string
	for _, p := range procs {
		if p.pid == os.Getpid() || !bytes.Contains(append(p.environ, 0), mark) || !strings.Contains(p.cmdline, s) {
			continue
		}
		if otherNS != "" && p.pidNS == otherNS {
			continue
		}
		out = append(out, fmt.Sprintf("%d:%s", p.pid, p.cmdline))
	}
	sort.Strings(out)
	return out
}

package gvisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/backend/native/prestart"
	image "github.com/agentkernel/agentkernel/internal/image/cache"
	"github.com/agentkernel/agentkernel/internal/netproc"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// forwarded are the signals a run passes on to its command.
var forwarded = []os.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH}

// killGrace is how long a command may run on after SIGINT, SIGTERM or
// SIGHUP before it is killed.
const killGrace = 3 * time.Second

// runscFailed is runsc's own exit status when it fails (rather than the
// command's).
const runscFailed = 128

// maxErrLog is how much of runsc's error log a run reads.
const maxErrLog = 64 << 10

// run is one Backend.Run.
type run struct {
	b     *Backend
	spec  *sandbox.Spec
	runsc string
	id    string
	dir   string // the run's private directory: bundle, state, writable layers
	// tun is the sandbox's TUN device from setupNetwork until
	// startNetwork hands it to net, the network helper (nil without a
	// network beyond loopback).
	tun *os.File
	net netproc.Helper
	// keep is a persistent sandbox's directory (its writable layer);
	// "" for a run.
	keep string
	// trace writes the run's stage lines (TraceEnv).
	trace tracer
	// ids: writable binds are idmapped for the invoking user
	// (ownedBind), into a block of host ids held until cleanup.
	ids ownedIDs
	// secretEnv are the variables of the sandbox's secrets (their
	// placeholders, the trust variables, AGENTKERNEL_SECRETS_PATH),
	// set by secretMounts: a persistent sandbox's execs get them too.
	secretEnv []string
	// caught, when set, is closed once the run catches the signals it
	// forwards: start waits for it before it starts runsc, so that no
	// signal can end agentkernel while runsc runs on without it.
	caught chan struct{}
	// mem is the run's scratch tmpfs (memScratch), "" where the bundle
	// and the root's writable layers are on disk: a persistent
	// sandbox's, or where the tmpfs cannot hold an overlay's upper
	// layer.
	mem string
	// restoreImage is the runsc image a persistent sandbox's boot
	// restores (a memory snapshot's first start), "" for a cold boot.
	restoreImage string
	// cg are the cgroups an ephemeral run made itself (owncgroup_linux.go),
	// nil where runsc makes them; joined delivers the result of moving
	// the thread that starts runsc into them, which joinErr then holds
	// once joinDone (both read by that thread alone).
	cg       *runCgroups
	joined   chan error
	joinErr  error
	joinDone bool
	// recorded is closed once cg is recorded in the run's directory
	// (for GC), which cleanup then removes.
	recorded chan struct{}
	// noCgroups runs runsc with --ignore-cgroups: the run's cgroups are
	// cg, or it has no limits at all.
	noCgroups bool
}

func (r *run) state() string  { return r.dir + "/state" }
func (r *run) bundle() string { return r.scratch() + "/bundle" }
func (r *run) rootfs() string { return r.scratch() + "/bundle/rootfs" }

// scratch holds the run's bundle and the root overlay's upper and work
// directories: a tmpfs seen only in the run's mount namespace (which
// goes with the namespace, nothing to remove), or the run's directory
// (a persistent sandbox's, or where that tmpfs cannot be used).
func (r *run) scratch() string {
	if r.mem != "" {
		return r.mem
	}
	return r.dir
}

// Run runs spec.Args under runsc to completion and removes every trace
// of the sandbox: its container state, mounts, cgroup and directory.
func (b *Backend) Run(ctx context.Context, spec *sandbox.Spec, stdio sandbox.Stdio) (sandbox.Result, error) {
	trace := newTracer()
	trace.stage("Run")
	// A prestarted native sandbox thread is of no use here.
	prestart.Discard()
	if err := refuse(b, spec); err != nil {
		return sandbox.Result{}, err
	}
	runsc, err := findRunsc()
	if err != nil {
		return sandbox.Result{}, err
	}
	if b.opts.DataDir == "" {
		return sandbox.Result{}, errors.New("the gvisor backend needs a data directory")
	}
	base := filepath.Join(b.opts.DataDir, "gvisor")
	if err := os.MkdirAll(base, 0o700); err != nil {
		return sandbox.Result{}, err
	}
	if err := checkRunsc(ctx, runsc, base); err != nil {
		return sandbox.Result{}, err
	}
	trace.stage("runsc checked")
	r := &run{b: b, spec: spec, runsc: runsc, id: "agentkernel-" + randomHex(), trace: trace}
	r.dir = filepath.Join(base, r.id)
	if err := os.Mkdir(r.dir, 0o700); err != nil {
		return sandbox.Result{}, err
	}
	lock, err := lockRun(r.dir)
	if err != nil {
		os.Remove(r.dir)
		return sandbox.Result{}, err
	}
	defer lock.Close()
	defer r.cleanup()
	return r.run(ctx, stdio)
}

// Check refuses, before the image is prepared, a run this backend cannot
// do yet (sandbox.Checker).
func (b *Backend) Check(spec *sandbox.Spec) error {
	var what string
	switch {
	case os.Geteuid() != 0:
		what = "runs as root only so far (runsc's rootless mode has no cgroups, and the bundle's mounts need root); run as root, or use -B native"
	case spec.Rootfs.Host || image.IsHost(spec.Image):
		what = "runs images only, not the host image: name an image with --image, or use -B native"
	case spec.Keep:
		what = "cannot keep the writable layer yet: use -B native"
	default:
		return nil
	}
	return fmt.Errorf("the gvisor backend %s: %w", what, sandbox.ErrUnsupported)
}

// refuse is Check, and what only the prepared root filesystem tells.
func refuse(b *Backend, spec *sandbox.Spec) error {
	if err := b.Check(spec); err != nil {
		return err
	}
	var what string
	switch {
	case spec.Rootfs.IDMap.UID != 0 || spec.Rootfs.IDMap.GID != 0:
		what = "needs an image store that keeps the images' own owners (run any agentkernel-full command once to convert it)"
	case len(spec.Rootfs.Layers) == 0:
		what = "needs the image's layers, and has none"
	default:
		return nil
	}
	return fmt.Errorf("the gvisor backend %s: %w", what, sandbox.ErrUnsupported)
}

func randomHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// started is what the run's thread reports once runsc runs (or could
// not be started).
type started struct {
	cmd *exec.Cmd
	err error
}

func (r *run) run(ctx context.Context, stdio sandbox.Stdio) (sandbox.Result, error) {
	errLog, err := os.OpenFile(r.dir+"/runsc-error.log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return sandbox.Result{}, err
	}
	defer errLog.Close()

	var con *console
	if r.spec.TTY {
		if con, err = newConsole(r.dir, stdio); err != nil {
			return sandbox.Result{}, err
		}
	}
	r.ownCgroups()
	startCh := make(chan started, 1)
	waitCh := make(chan error, 1)
	tids := make(chan int, 1)
	r.caught = make(chan struct{})
	goLocked(func() {
		// The thread unshares a mount namespace for the run and starts
		// runsc from it. It is never unlocked: it ends with this
		// goroutine, and the namespace (with every mount of the run)
		// with the last of runsc's processes.
		tids <- unix.Gettid()
		cmd, err := r.start(stdio, errLog, con)
		startCh <- started{cmd, err}
		if r.cg != nil {
			// runsc has its cgroups (or never started): the thread goes
			// back to the process's own while runsc boots.
			r.waitJoined()
			_ = r.cg.leave(unix.Gettid())
		}
		if err == nil {
			waitCh <- cmd.Wait()
		}
	})
	if r.cg != nil {
		// The thread's move waits for an RCU grace period in the kernel:
		// made from here while the thread builds the bundle.
		tid := <-tids
		go func() {
			defer close(r.recorded)
			r.joined <- r.cg.join(tid)
			// For GC, should this process be killed: runsc will not
			// remove these cgroups.
			if err := r.cg.record(r.dir); err != nil {
				r.b.opts.Warn(fmt.Sprintf("recording the sandbox's cgroups: %v", err))
			}
		}()
	}
	// While that thread builds the bundle: building encoding/json's
	// encoders for config.json's types, which writeConfig would
	// otherwise build on the thread's way to runsc, and catching the
	// signals (the runtime's first signal.Notify starts its signal loop
	// and changes seven handlers).
	warmConfigEncoders()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	close(r.caught)
	st := <-startCh
	r.trace.stage("runsc started")
	if st.err != nil {
		if con != nil {
			con.close()
		}
		return sandbox.Result{}, st.err
	}

	var (
		res       sandbox.Result
		waitErr   error
		timeout   <-chan time.Time
		grace     <-chan time.Time
		killed    bool
		cancelled bool
		interrupt int
	)
	if t := r.spec.Resources.Timeout; t > 0 {
		timer := time.NewTimer(t)
		defer timer.Stop()
		timeout = timer.C
	}
	kill := func() {
		if !killed {
			killed = true
			r.signal(unix.SIGKILL)
		}
		// runsc may not have made the container yet: its own process
		// goes too (what it made, delete --force removes).
		grace = time.After(killGrace)
	}
	done := ctx.Done()
wait:
	for {
		select {
		case waitErr = <-waitCh:
			break wait
		case <-done:
			cancelled, done = true, nil
			kill()
		case <-timeout:
			res.TimedOut, timeout = true, nil
			kill()
		case s := <-sigs:
			sig := s.(syscall.Signal)
			if sig == unix.SIGWINCH && con != nil {
				con.onResize()
				continue
			}
			r.signal(sig)
			if sig == unix.SIGINT || sig == unix.SIGTERM || sig == unix.SIGHUP {
				interrupt++
				switch {
				case interrupt > 1:
					kill()
				case grace == nil:
					grace = time.After(killGrace)
				}
			}
		case <-grace:
			grace = nil
			if killed {
				_ = st.cmd.Process.Kill()
			} else {
				kill()
			}
		}
	}
	r.trace.stage("runsc exited")
	if con != nil {
		con.close()
	}
	if err := r.stopNetwork(&res); err != nil {
		r.b.opts.Warn("network: " + err.Error())
	}
	code := st.cmd.ProcessState.ExitCode()
	if ws, ok := st.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	if code == runscFailed || code < 0 {
		if msg := runscError(r.dir + "/runsc-error.log"); msg != "" {
			if cancelled || res.TimedOut {
				code = 128 + int(unix.SIGKILL)
			} else {
				return res, r.failure(msg)
			}
		} else if waitErr != nil && code < 0 {
			return res, fmt.Errorf("runsc: %w", waitErr)
		}
	}
	if cancelled && !res.TimedOut {
		return res, ctx.Err()
	}
	res.ExitCode = code
	if code > 128 && code < 128+65 {
		res.Signal = code - 128
	}
	return res, nil
}

// ownCgroups makes an ephemeral run's cgroups (owncgroup_linux.go), or
// leaves them to runsc where it cannot.
func (r *run) ownCgroups() {
	if r.keep != "" || r.restoreImage != "" {
		return
	}
	if resources(r.spec.Resources) == nil {
		// Nothing to limit: no cgroup at all (runsc would make one
		// named after the container).
		r.noCgroups = true
		return
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return
	}
	cg, err := makeRunCgroups("/sys/fs/cgroup", string(self), isCgroup2Only(), cgroupName(r.id), r.spec.Resources)
	if err != nil {
		return
	}
	r.cg, r.noCgroups, r.joined, r.recorded = cg, true, make(chan error, 1), make(chan struct{})
	r.trace.stage("cgroups made")
}

// waitJoined is the result of moving the calling thread (the one that
// starts runsc) into the run's cgroups, waited for once.
func (r *run) waitJoined() error {
	if !r.joinDone {
		r.joinErr, r.joinDone = <-r.joined, true
	}
	return r.joinErr
}

// signal sends sig to the sandbox's command: SIGINT and SIGQUIT (which a
// terminal sends to its whole foreground job) and SIGKILL to every
// process in it, the others to the command.
func (r *run) signal(sig syscall.Signal) {
	args := []string{"--root", r.state(), "kill"}
	if sig == unix.SIGINT || sig == unix.SIGQUIT || sig == unix.SIGKILL {
		args = append(args, "--all")
	}
	args = append(args, r.id, strconv.Itoa(int(sig)))
	_ = exec.Command(r.runsc, args...).Run()
}

// runscError is the last error runsc logged (--log-fd), "" if none.
func runscError(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, maxErrLog))
	msg := ""
	for _, line := range bytes.Split(b, []byte("\n")) {
		var e struct {
			Msg   string `json:"msg"`
			Level string `json:"level"`
		}
		// runsc writes its records without a newline between them.
		dec := json.NewDecoder(bytes.NewReader(line))
		for dec.Decode(&e) == nil {
			if e.Msg != "" {
				msg = e.Msg
			}
		}
	}
	return msg
}

// failure turns runsc's error message into the run's error: the
// command missing or not executable map to ErrNotFound and
// ErrCannotInvoke, a runsc too old for this backend says so.
func (r *run) failure(msg string) error {
	_, last, _ := strings.Cut(msg, "failed to load ")
	switch {
	case last != "" && strings.HasSuffix(last, "no such file or directory"):
		return fmt.Errorf("%s: %w", r.command(), sandbox.ErrNotFound)
	case last != "" && (strings.HasSuffix(last, "permission denied") || strings.HasSuffix(last, "exec format error") || strings.HasSuffix(last, "is a directory")):
		return fmt.Errorf("%s: %s: %w", r.command(), last[strings.LastIndex(last, ": ")+2:], sandbox.ErrCannotInvoke)
	case strings.Contains(msg, "executable file not found"):
		return fmt.Errorf("%s: %w", r.command(), sandbox.ErrNotFound)
	}
	return fmt.Errorf("runsc: %s", msg)
}

func (r *run) command() string {
	if len(r.spec.Args) > 0 {
		return r.spec.Args[0]
	}
	return "the image's command"
}

// cleanup removes what the run left: runsc's container (when runsc did
// not delete it itself) and the run's directory.
func (r *run) cleanup() {
	r.trace.stage("cleanup")
	var res sandbox.Result
	_ = r.stopNetwork(&res)
	if f := r.b.opts.OnSecretInjections; f != nil && r.keep != "" && len(res.SecretInjections) > 0 {
		f(r.spec, res.SecretInjections)
	}
	if left, _ := os.ReadDir(r.state()); containerLeft(left) {
		_ = exec.Command(r.runsc, "--root", r.state(), "delete", "--force", r.id).Run()
		r.trace.stage("runsc delete")
	}
	if r.recorded != nil {
		<-r.recorded
	}
	if resources(r.spec.Resources) != nil || r.keep != "" {
		// A sandbox killed mid-run (a cancelled run) leaves its cgroups
		// a moment after runsc has ended: longer under a small CPU
		// quota, which throttles its last processes too.
		for n := 0; n < 100 && removeCgroupsLeft(cgroupName(r.id)); n++ {
			time.Sleep(50 * time.Millisecond)
		}
		r.trace.stage("cgroups removed")
	}
	if err := os.RemoveAll(r.dir); err != nil {
		r.b.opts.Warn(fmt.Sprintf("removing the gvisor sandbox's directory: %v", err))
	}
	r.trace.stage("directory removed")
	r.ids.release()
}

// containerLeft reports whether runsc's state directory still holds a
// container: anything but its shared network namespace file.
func containerLeft(entries []os.DirEntry) bool {
	for _, e := range entries {
		if e.Name() != "null-netns" {
			return true
		}
	}
	return false
}

// goLocked runs f in a new goroutine locked for good to a thread that is
// not the process's main thread, which then ends with f. The runtime
// never ends the main thread: a mount or network namespace it unshared
// would stay (in /proc/PID/mountinfo, with every mount of the run) until
// the process exits. On the main thread the goroutine holds it while
// another one, which then cannot be given it, runs f.
func goLocked(f func()) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			done := make(chan struct{})
			goLocked(func() {
				defer close(done)
				f()
			})
			<-done
			runtime.UnlockOSThread()
			return
		}
		f()
	}()
}

// cgroupName is the sandbox's cgroup, relative to agentkernel's own:
// runsc makes it there (config.json's cgroupsPath).
func cgroupName(id string) string { return "agentkernel-gvisor-" + id }

// removeCgroups removes the cgroup runsc made for a sandbox whose start
// failed (runsc removes it after a run): below this process's cgroup in
// each hierarchy, or below its parent (where runsc puts it on a pure
// cgroup v2 host). Only an empty cgroup can be removed.
func removeCgroups(name string) { removeCgroupsLeft(name) }

// removeCgroupsLeft is removeCgroups, reporting whether any of them is
// still there (a process of the sandbox still in it).
func removeCgroupsLeft(name string) (left bool) {
	_, left = removeCgroupDirs(name)
	return left
}

// removeCgroupDirs is removeCgroupsLeft, also returning the directories
// it removed.
func removeCgroupDirs(name string) (removed []string, left bool) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		mnt := "/sys/fs/cgroup/" + strings.TrimPrefix(parts[1], "name=")
		if parts[1] == "" {
			mnt = "/sys/fs/cgroup"
			if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.controllers"); err == nil {
				mnt = "/sys/fs/cgroup/unified"
			}
		}
		for _, dir := range []string{parts[2], filepath.Dir(parts[2])} {
			p := filepath.Join(mnt, dir, name)
			switch err := unix.Rmdir(p); {
			case err == nil:
				removed = append(removed, p)
			case err != unix.ENOENT:
				left = true
			}
		}
	}
	return removed, left
}

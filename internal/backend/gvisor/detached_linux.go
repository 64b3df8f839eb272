package gvisor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Detached commands of a persistent sandbox are containers of its
// sandbox, not `runsc exec`s: gVisor's restore kills every process an
// exec made (doc.go), while a container's own processes come back with
// their memory. Each is
//
//   - a bundle of its own, <dir>/gvisor/d-<ID>/config.json: the
//     sandbox's own config.json (the same root, mounts, seccomp filter
//     and namespaces, so that it sees what an exec sees) with the
//     command as its process, no cgroup of its own (the sandbox's holds
//     it), no PID namespace of its own (it runs in the sandbox's, where
//     execs see it and its pid means what an exec's does), and the
//     annotations that make it a container of the sandbox, named by the
//     detached command's id;
//   - made with `runsc create` and `runsc start` from the boot's thread,
//     in the boot's mount namespace (its gofer must see the root), its
//     stdio runsc create's;
//   - waited for with `runsc wait`, signalled with `runsc kill` (--all
//     for its group), deleted once it has ended.
//
// A memory snapshot (Checkpoint) writes the sandbox's image and, beside
// it, each detached container's process (containers/<ID>.json); the
// first boot of a sandbox restored from it restores the sandbox and then
// each such container from the image, over bundles made as above with
// the kept process (runsc checks that it is the same), and hands them to
// the agent as running (RestoredDetached).

// The annotations that make containers of one sandbox (runsc reads
// them as containerd's CRI plugin writes them) and name each.
const (
	annSandboxID = "io.kubernetes.cri.sandbox-id"
	annType      = "io.kubernetes.cri.container-type"
	annName      = "io.kubernetes.cri.container-name"
)

var (
	_ agent.DetachedExecer   = (*Instance)(nil)
	_ agent.DetachedRestorer = (*Instance)(nil)
)

// detachedCID is the runsc container id of detached command id: not
// the sandbox's id and a suffix (runsc finds a container by a prefix of
// its id, and the sandbox's would be ambiguous); runsc's state is the
// sandbox's own (--root), so no other sandbox's containers are there.
func detachedCID(id string) string { return detachedPrefix + id }

const detachedPrefix = "detached-"

// inNS runs f on the boot's thread, in its mount (and network)
// namespace, and returns its error; an error once the sandbox has ended.
func (in *Instance) inNS(f func() error) error {
	errc := make(chan error, 1)
	select {
	case in.calls <- func() { errc <- f() }:
	case <-in.done:
		return errors.New("the sandbox has ended")
	}
	return <-errc
}

// containerSpec is config.json of a container of the sandbox running
// process p (its bundle's root and mounts the sandbox's own), named name.
func (in *Instance) containerSpec(p *specs.Process, name string) (*specs.Spec, error) {
	b, err := os.ReadFile(filepath.Join(in.r.bundle(), "config.json"))
	if err != nil {
		return nil, err
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	s.Process = p
	s.Annotations = map[string]string{annSandboxID: in.r.id, annType: "container", annName: name}
	s.Hooks = nil
	if s.Linux != nil {
		s.Linux.Resources, s.Linux.CgroupsPath = nil, ""
		var ns []specs.LinuxNamespace
		for _, n := range s.Linux.Namespaces {
			if n.Type != specs.PIDNamespace {
				ns = append(ns, n)
			}
		}
		s.Linux.Namespaces = ns
	}
	return &s, nil
}

// writeBundle writes the bundle of detached container id with s as its
// config.json and returns its directory.
func (in *Instance) writeBundle(id string, s *specs.Spec) (string, error) {
	dir := filepath.Join(in.r.dir, "d-"+id)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600)
}

// ExecDetached starts req as detached command id: a container of the
// sandbox (agent.DetachedExecer), stdio its descriptors 0-2.
func (in *Instance) ExecDetached(id string, req *agent.ExecRequest, stdio [3]int) (agent.Process, error) {
	if err := sandbox.ValidDetachedID(id); err != nil {
		return nil, &agent.ExecError{Kind: agent.KindSetup, Msg: err.Error()}
	}
	p, err := in.execProcess(req)
	if err != nil {
		return nil, err
	}
	s := ociSpec(in.r.spec, p, nil, "")
	cs, err := in.containerSpec(s.Process, id)
	if err != nil {
		return nil, &agent.ExecError{Kind: agent.KindSetup, Msg: "the sandbox's bundle: " + err.Error()}
	}
	bundle, err := in.writeBundle(id, cs)
	if err != nil {
		return nil, err
	}
	cid := detachedCID(id)
	files, err := dupStdio(stdio)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	err = in.inNS(func() error {
		c := in.r.containerCmd(bundle, "create", "--bundle", bundle, cid)
		if err := runLogged(c, bundle); err != nil {
			return fmt.Errorf("runsc create: %w", err)
		}
		// The container's stdio is runsc start's.
		start := in.r.containerCmd(bundle, "start", cid)
		start.Stdin, start.Stdout, start.Stderr = files[0], files[1], files[2]
		if err := runLogged(start, bundle); err != nil {
			_ = exec.Command(in.r.runsc, "--root", in.r.state(), "delete", "--force", cid).Run()
			return fmt.Errorf("runsc start: %w", err)
		}
		return nil
	})
	if err != nil {
		_ = os.RemoveAll(bundle)
		return nil, &agent.ExecError{Kind: agent.KindSetup, Msg: err.Error()}
	}
	return in.watchContainer(cid, bundle), nil
}

// execProcess resolves req's command as Exec does: its user, working
// directory, environment and capabilities, checked to exist in the root.
func (in *Instance) execProcess(req *agent.ExecRequest) (*process, error) {
	if len(req.Args) == 0 {
		return nil, &agent.ExecError{Kind: agent.KindSetup, Msg: "no command"}
	}
	root := "/proc/self/fd/" + strconv.Itoa(in.rootFd)
	user := req.User
	if user == "" {
		user = in.r.spec.User
	}
	if user == "" {
		user = in.r.spec.Rootfs.Config.User
	}
	uid, gid, groups, _, err := native.ResolveUser(root, user)
	if err != nil {
		return nil, &agent.ExecError{Kind: agent.KindSetup, Msg: err.Error()}
	}
	workdir := req.Workdir
	if workdir == "" {
		workdir = in.r.spec.Workdir
	}
	env := append(append(append([]string{}, in.r.spec.Env...), in.r.secretEnv...), req.Env...)
	espec := &sandbox.Spec{Args: req.Args, Workdir: workdir, Env: env,
		User: strconv.Itoa(uid) + ":" + strconv.Itoa(gid), Rootfs: in.r.spec.Rootfs, Security: in.r.spec.Security, Mounts: in.r.spec.Mounts, ReadOnlyRoot: in.r.spec.ReadOnlyRoot}
	p, err := resolveProcess(espec, root)
	if err != nil {
		return nil, &agent.ExecError{Kind: agent.KindSetup, Msg: err.Error()}
	}
	if err := lookCommand(root, p, espec); err != nil {
		errno := unix.ENOENT
		if errors.Is(err, sandbox.ErrCannotInvoke) {
			errno = unix.EACCES
		}
		return nil, &agent.ExecError{Kind: agent.KindExec, Errno: errno, Msg: err.Error()}
	}
	p.uid, p.gid, p.groups, p.isRoot = uid, gid, groups, uid == 0
	return p, nil
}

// dupStdio duplicates the descriptors stdio as files (close-on-exec).
func dupStdio(stdio [3]int) ([]*os.File, error) {
	files := make([]*os.File, 0, 3)
	for _, fd := range stdio {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, err
		}
		files = append(files, os.NewFile(uintptr(d), "stdio"))
	}
	return files, nil
}

// containerCmd is runsc with the sandbox's flags and args, for a
// container whose bundle is in bundle: its log (--log-fd 3, which
// runLogged opens) there too, so that runsc's own errors never reach
// the command's stderr.
func (r *run) containerCmd(bundle string, args ...string) *exec.Cmd {
	return exec.Command(r.runsc, append(append(r.globalArgs(r.state()), "--log-fd=3"), args...)...)
}

// runLogged runs c (containerCmd's) with its log in bundle/runsc.log (a
// file: runsc's children inherit the descriptor, which a pipe would
// never see closed) and returns the last error it logged, if it failed.
func runLogged(c *exec.Cmd, bundle string) error {
	p := filepath.Join(bundle, "runsc.log")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	c.ExtraFiles = []*os.File{f}
	err = c.Run()
	f.Close()
	if err != nil {
		if msg := runscError(p); msg != "" {
			return errors.New(msg)
		}
	}
	return err
}

// containerProc is a detached command running as a container of the
// sandbox.
type containerProc struct {
	in     *Instance
	cid    string
	pid    int
	done   chan struct{}
	status syscall.WaitStatus
}

// watchContainer returns container cid as a Process: its pid found, and
// waited for (then deleted, its bundle removed) from now on.
func (in *Instance) watchContainer(cid, bundle string) *containerProc {
	p := &containerProc{in: in, cid: cid, done: make(chan struct{})}
	p.pid = in.containerPid(cid)
	go func() {
		out, err := exec.Command(in.r.runsc, "--root", in.r.state(), "wait", cid).Output()
		var res struct {
			ExitStatus int `json:"exitStatus"`
		}
		switch {
		case err == nil && json.Unmarshal(bytes.TrimSpace(out), &res) == nil:
			p.status = syscall.WaitStatus(res.ExitStatus << 8)
			if n := res.ExitStatus; n > 128 && n < 128+65 {
				p.status = syscall.WaitStatus(n - 128)
			}
		default:
			// The sandbox went (stopped, killed) with it.
			p.status = syscall.WaitStatus(unix.SIGKILL)
		}
		_ = in.inNS(func() error {
			return exec.Command(in.r.runsc, "--root", in.r.state(), "delete", "--force", cid).Run()
		})
		_ = os.RemoveAll(bundle)
		close(p.done)
	}()
	return p
}

// containerPid is the pid, in the sandbox's PID namespace, of container
// cid's first process: the lowest of its pids (`runsc ps --format json`
// lists them), which the first process took before it forked any (0 if
// runsc does not say).
func (in *Instance) containerPid(cid string) int {
	out, err := exec.Command(in.r.runsc, "--root", in.r.state(), "ps", "--format", "json", cid).Output()
	if err != nil {
		return 0
	}
	var pids []int
	if json.Unmarshal(bytes.TrimSpace(out), &pids) != nil || len(pids) == 0 {
		return 0
	}
	return slices.Min(pids)
}

func (p *containerProc) Pid() int { return p.pid }

func (p *containerProc) kill(sig syscall.Signal, all bool) error {
	select {
	case <-p.done:
		return unix.ESRCH
	default:
	}
	args := []string{"--root", p.in.r.state(), "kill"}
	if all {
		args = append(args, "--all")
	}
	return exec.Command(p.in.r.runsc, append(args, p.cid, strconv.Itoa(int(sig)))...).Run()
}

func (p *containerProc) Signal(sig syscall.Signal) error { return p.kill(sig, false) }

// SignalGroup signals every process of the container: what the command
// started.
func (p *containerProc) SignalGroup(sig syscall.Signal) error { return p.kill(sig, true) }

func (p *containerProc) Wait() syscall.WaitStatus {
	<-p.done
	return p.status
}

// RestoredDetached hands over the detached commands the boot restored
// (agent.DetachedRestorer), once.
func (in *Instance) RestoredDetached() map[string]agent.Restored {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := in.restored
	in.restored = nil
	return out
}

// restoreContainers restores, after the sandbox's own restore has
// begun, each detached container the image at restoreDir holds
// (containers/<ID>.json), over a bundle made now with its kept process.
func (in *Instance) restoreContainers(restoreDir string) error {
	ents, err := os.ReadDir(filepath.Join(restoreDir, "containers"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	restored := map[string]agent.Restored{}
	fail := func(err error) error {
		for _, r := range restored {
			r.Stdout.Close()
			r.Stderr.Close()
		}
		return err
	}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || sandbox.ValidDetachedID(id) != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(restoreDir, "containers", e.Name()))
		if err != nil {
			return fail(err)
		}
		var p specs.Process
		if err := json.Unmarshal(b, &p); err != nil {
			return fail(fmt.Errorf("detached command %s's process: %w", id, err))
		}
		cs, err := in.containerSpec(&p, id)
		if err != nil {
			return fail(err)
		}
		bundle, err := in.writeBundle(id, cs)
		if err != nil {
			return fail(err)
		}
		var pipes [2][2]*os.File
		for i := range pipes {
			if pipes[i][0], pipes[i][1], err = os.Pipe(); err != nil {
				return fail(err)
			}
		}
		null, err := os.Open(os.DevNull)
		if err != nil {
			return fail(err)
		}
		cid := detachedCID(id)
		err = in.inNS(func() error {
			c := in.r.containerCmd(bundle, "restore", "--detach", "--image-path", filepath.Join(restoreDir, "image"), "--bundle", bundle, cid)
			c.Stdin, c.Stdout, c.Stderr = null, pipes[0][1], pipes[1][1]
			if err := runLogged(c, bundle); err != nil {
				return fmt.Errorf("runsc restore of detached command %s: %w", id, err)
			}
			return nil
		})
		null.Close()
		pipes[0][1].Close()
		pipes[1][1].Close()
		if err != nil {
			pipes[0][0].Close()
			pipes[1][0].Close()
			return fail(err)
		}
		restored[id] = agent.Restored{Proc: in.watchContainer(cid, bundle), Stdout: pipes[0][0], Stderr: pipes[1][0]}
	}
	in.mu.Lock()
	in.restored = restored
	in.mu.Unlock()
	return nil
}

// deleteDetached deletes what is left of the detached commands'
// containers once the sandbox has ended: their gofers (in the sandbox's
// cgroup) end with them.
func (in *Instance) deleteDetached() {
	ents, _ := os.ReadDir(in.r.state())
	for _, e := range ents {
		// runsc's state files: <container id>_sandbox:<sandbox id>.state
		cid, _, ok := strings.Cut(e.Name(), "_sandbox:")
		if !ok || !strings.HasPrefix(cid, detachedPrefix) || sandbox.ValidDetachedID(strings.TrimPrefix(cid, detachedPrefix)) != nil {
			continue
		}
		_ = exec.Command(in.r.runsc, "--root", in.r.state(), "delete", "--force", cid).Run()
	}
}

package probe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// innerEnv marks the child that Isolated starts.
const innerEnv = "ATTACK_CONTROL_INNER"

// PastGate reports whether err shows that a system call got past its
// permission check: it succeeded, or failed with anything but EPERM,
// EACCES (the capability or LSM check) or ENOSYS (not built, or filtered
// by seccomp). Probes call privileged system calls with arguments that
// are deliberately invalid (a wrong magic number, an unknown flag, a path
// that does not exist), so that getting past the gate changes nothing.
func PastGate(err error) bool {
	return err == nil || !(errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSYS))
}

// Isolated runs fn in a child process in new namespaces (flags, a set of
// CLONE_NEW* bits), so that a control can use a privilege without
// touching the host: as root in those namespaces; as any other user in a
// new user namespace of its own as well, where it is root as a rootless
// sandbox's root is. fn runs in the child and must report; the parent
// relays the child's output and exits with its status.
func Isolated(name string, flags uintptr, fn func()) {
	if os.Getenv(innerEnv) == "1" {
		os.Unsetenv(innerEnv)
		fn()
		Report(name, Error, "the isolated step ended without a report")
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Env = append(os.Environ(), innerEnv+"=1")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	attr := &syscall.SysProcAttr{Cloneflags: flags, Pdeathsig: syscall.SIGKILL}
	if !Privileged() {
		attr.Cloneflags |= unix.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
	}
	cmd.SysProcAttr = attr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		os.Exit(0)
	case errors.As(err, &ee):
		os.Exit(1)
	}
	Report(name, Error, fmt.Sprintf("starting the isolated step (namespaces %#x): %v", attr.Cloneflags, err))
}

// Attack is what the probe's attack reported when run on the host, and
// how much output it wrote.
type Attack struct {
	Result, Detail string
	Output         int64
}

// AttackOnHost runs this probe's attack in a child process here, outside
// any sandbox, and returns what it reported. setup may adjust the command
// (extra files, a session, arguments, environment). The attack gets 30
// seconds.
func AttackOnHost(setup func(*exec.Cmd)) Attack {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/proc/self/exe")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, ControlEnv+"=") && !strings.HasPrefix(kv, innerEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out := &tail{max: 64 << 10}
	var stderr tail
	stderr.max = 4 << 10
	cmd.Stdout, cmd.Stderr = out, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if setup != nil {
		setup(cmd)
	}
	err := cmd.Run()
	rep, ok := ParseReport(out.buf)
	if !ok {
		return Attack{Result: Error, Detail: fmt.Sprintf("the attack gave no report (%v): %s", err, strings.TrimSpace(string(stderr.buf))), Output: out.total}
	}
	return Attack{Result: rep.Result, Detail: rep.Detail, Output: out.total}
}

// AttackReaches is the control of a probe whose attack is harmless on the
// host: it runs the attack here (AttackOnHost with setup) and reports
// Reachable when it got through and NotApplicable when the attack itself
// found no target. Otherwise it calls otherwise (when not nil), which may
// report NotApplicable with the reason the kernel refuses this kind of
// user; if it returns, the result is Unreachable.
func AttackReaches(name string, setup func(*exec.Cmd), otherwise func(a Attack)) {
	a := AttackOnHost(setup)
	switch a.Result {
	case Allowed:
		Report(name, Reachable, "outside any sandbox the attack gets through: "+a.Detail)
	case NotApplicable:
		Report(name, NotApplicable, a.Detail)
	}
	if otherwise != nil {
		otherwise(a)
	}
	Report(name, Unreachable, fmt.Sprintf("the attack does not get through even outside a sandbox (%s): %s", a.Result, a.Detail))
}

// tail keeps the last max bytes written to it and counts them all.
type tail struct {
	max   int
	buf   []byte
	total int64
}

func (w *tail) Write(p []byte) (int, error) {
	w.total += int64(len(p))
	w.buf = append(w.buf, p...)
	if len(w.buf) > 2*w.max {
		w.buf = append(w.buf[:0], w.buf[len(w.buf)-w.max:]...)
	}
	return len(p), nil
}

// PrivateMounts makes every mount of the (new) mount namespace private,
// so that nothing a control mounts there propagates to the host.
func PrivateMounts() error {
	return unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
}

// Errno is err's errno, or err itself.
func Errno(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err.Error()
	}
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// Refused reports whether err is a permission check's refusal: EPERM or
// EACCES. An unprivileged control reports NotApplicable only for that:
// any other failure is the probe's own and must show as Unreachable.
func Refused(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)
}

// RefusedOrAbsent reports whether every error of errs is a refusal
// (Refused) or an absent target (ENOENT, ENXIO, ENODEV), and at least one
// is a refusal: what "this user may reach none of them" must look like.
func RefusedOrAbsent(errs ...error) bool {
	refused := false
	for _, err := range errs {
		switch {
		case Refused(err):
			refused = true
		case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENODEV):
		default:
			return false
		}
	}
	return refused
}

// KernelLacks reports whether errs show that the kernel lacks a system
// call: every one failed with ENOSYS and this process runs under no
// seccomp filter. Inside a sandbox ENOSYS is what the seccomp filter
// returns (a block, never "not applicable"); on the host it means the
// kernel lacks the call only where no filter could have returned it. The
// string says why not when it is false.
func KernelLacks(errs ...error) (bool, string) {
	for _, err := range errs {
		if !errors.Is(err, unix.ENOSYS) {
			return false, fmt.Sprintf("not every call failed with ENOSYS (%v)", err)
		}
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false, "cannot read /proc/self/status: " + err.Error()
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "Seccomp:" {
			if f[1] != "0" {
				return false, "ENOSYS, but this process runs under a seccomp filter (Seccomp: " + f[1] + "), which may have returned it: the kernel's support is unknown"
			}
			return true, ""
		}
	}
	return false, "no Seccomp field in /proc/self/status"
}

// RefusedText is RefusedOrAbsent for a probe that keeps its errors as
// text ("what: errno"): every message ends in EPERM's or EACCES's text,
// or in ENOENT's where absent targets may be among them, and at least
// one in a refusal.
func RefusedText(msgs []string, absentOK bool) bool {
	refused := false
	for _, m := range msgs {
		switch {
		case strings.HasSuffix(m, unix.EPERM.Error()) || strings.HasSuffix(m, unix.EACCES.Error()):
			refused = true
		case absentOK && strings.HasSuffix(m, unix.ENOENT.Error()):
		default:
			return false
		}
	}
	return refused
}

package native

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// execMain is the exec stage: the process that becomes the command. It
// waits for the init to finish the root, then fences itself in, thread by
// thread nothing else runs on: capabilities, identity, rlimits,
// no_new_privs, Landlock, seccomp, execve. Every step works on the calling
// thread (locked), which is the one execve keeps.
func execMain() int {
	runtime.LockOSThread()
	errW := os.NewFile(fdErr, "errors")
	unix.CloseOnExec(fdErr)
	cfgSock := os.NewFile(fdConfig, "exec-config")
	if _, err := cfgSock.Write([]byte{'r'}); err != nil {
		return 125
	}
	data, err := io.ReadAll(cfgSock)
	if err != nil || len(data) == 0 {
		return 125 // the init gave up; it reports why
	}
	var c execConfig
	if err := json.Unmarshal(data, &c); err != nil {
		_, _ = errW.Write((&stageFailure{Msg: "exec config: " + err.Error()}).encode())
		return 125
	}
	if exec, err := fence(&c); err != nil {
		f := &stageFailure{Exec: exec, Errno: errnoOf(err), Msg: err.Error()}
		_, _ = errW.Write(f.encode())
		switch {
		case !exec:
			return 125
		case f.Errno == unix.ENOENT:
			return 127
		}
		return 126
	}
	return 0 // not reached
}

// fence applies the exec config and execs the command: the exec
// stage's steps (execSteps) in order. It returns only on failure, with
// exec true when the command could not be executed rather than the
// process set up for it.
func fence(c *execConfig) (exec bool, err error) {
	keep, err := capMask(c.Caps)
	if err != nil {
		return false, err
	}
	for _, st := range execSteps {
		if err := st.fence(c, keep); err != nil {
			return st.exec, err
		}
	}
	return true, errors.New("exec returned") // not reached
}

func fenceBoundingSet(_ *execConfig, keep uint64) error {
	if err := dropBoundingSet(keep); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	return nil
}

func fenceWorkdir(c *execConfig, _ uint64) error {
	if err := unix.Chdir(c.Workdir); err != nil {
		return fmt.Errorf("workdir %s: %w", c.Workdir, err)
	}
	return nil
}

func fenceLimits(c *execConfig, _ uint64) error {
	if c.NoFile > 0 {
		_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: c.NoFile, Max: c.NoFile})
	}
	return nil
}

// fenceResolve finds the command (the stub's builder does it for the
// stub: releaseStub).
func fenceResolve(c *execConfig, _ uint64) error {
	path, err := lookPath(c.Args[0], c.Env)
	c.path = path
	return err
}

func fenceNoNewPrivs(*execConfig, uint64) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return nil
}

func fenceLandlock(c *execConfig, _ uint64) error {
	if !c.Landlock {
		return nil
	}
	if err := restrictPaths(c); err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	return nil
}

func fenceSeccomp(c *execConfig, _ uint64) error {
	if len(c.Filter) == 0 {
		return nil
	}
	prog := unsafe.Slice((*unix.SockFilter)(unsafe.Pointer(&c.Filter[0])), len(c.Filter)/8)
	return loadSeccomp(prog)
}

func fenceExec(c *execConfig, _ uint64) error {
	err := unix.Exec(c.path, c.Args, c.Env)
	return fmt.Errorf("exec %s: %w", c.Args[0], err)
}

// setIdentity switches to the command's user, group and supplementary
// groups, on this thread only (x/sys/unix, not syscall: the latter
// signals every runtime thread); the others die at execve.
func setIdentity(c *execConfig) error {
	groups := c.Groups
	if groups == nil {
		groups = []int{}
	}
	if !c.NoSetgroups {
		if err := unix.Setgroups(groups); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
	}
	if err := unix.Setresgid(c.GID, c.GID, c.GID); err != nil {
		return fmt.Errorf("setgid %d: %w", c.GID, err)
	}
	if err := unix.Setresuid(c.UID, c.UID, c.UID); err != nil {
		return fmt.Errorf("setuid %d: %w", c.UID, err)
	}
	return nil
}

// lookPath finds the command like execvp does, with the command's own
// PATH, in this process's root (the sandbox's).
func lookPath(name string, env []string) (string, error) {
	return searchPath(name, env, func(p string) (found, executable bool) {
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return false, false
		}
		return true, unix.Access(p, unix.X_OK) == nil
	})
}

// searchPath walks the PATH of env as execvp does for name, asking probe
// about each candidate: whether it is there (and not a directory) and
// whether it may be executed.
func searchPath(name string, env []string, probe func(p string) (found, executable bool)) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathEnv := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	denied := false
	for _, dir := range strings.Split(pathEnv, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + name
		found, executable := probe(p)
		if !found {
			continue
		}
		if !executable {
			denied = true
			continue
		}
		return p, nil
	}
	if denied {
		return "", fmt.Errorf("%s: %w", name, unix.EACCES)
	}
	return "", &notInPathError{name}
}

// notInPathError is a command name that no directory of $PATH holds: ENOENT,
// said once (the caller adds "command not found" from the errno).
type notInPathError struct{ name string }

func (e *notInPathError) Error() string { return e.name + ": executable file not found in $PATH" }

func (e *notInPathError) Unwrap() error { return unix.ENOENT }

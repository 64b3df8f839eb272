package native

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
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
		fmt.Fprintf(errW, "setup 0 exec config: %v", err)
		return 125
	}
	if kind, err := fence(&c); err != nil {
		errno := 0
		var en syscall.Errno
		if errors.As(err, &en) {
			errno = int(en)
		}
		fmt.Fprintf(errW, "%s %d %v", kind, errno, err)
		if kind == "exec" {
			if en == unix.ENOENT {
				return 127
			}
			return 126
		}
		return 125
	}
	return 0 // not reached
}

// fence applies the exec config and execs the command. It returns only on
// failure, with "setup" or "exec" saying which side failed.
func fence(c *execConfig) (string, error) {
	keep, err := capMask(c.Caps)
	if err != nil {
		return "setup", err
	}
	if err := dropBoundingSet(keep); err != nil {
		return "setup", err
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return "setup", fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	if err := setIdentity(c); err != nil {
		return "setup", err
	}
	if err := setCapabilities(keep); err != nil {
		return "setup", err
	}
	if err := unix.Chdir(c.Workdir); err != nil {
		return "setup", fmt.Errorf("workdir %s: %w", c.Workdir, err)
	}
	if c.NoFile > 0 {
		_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: c.NoFile, Max: c.NoFile})
	}
	path, err := lookPath(c.Args[0], c.Env)
	if err != nil {
		return "exec", err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return "setup", fmt.Errorf("no_new_privs: %w", err)
	}
	if c.Landlock {
		if err := restrictPaths(c); err != nil {
			return "setup", fmt.Errorf("landlock: %w", err)
		}
	}
	if len(c.Filter) > 0 {
		prog := unsafe.Slice((*unix.SockFilter)(unsafe.Pointer(&c.Filter[0])), len(c.Filter)/8)
		if err := loadSeccomp(prog); err != nil {
			return "setup", err
		}
	}
	err = unix.Exec(path, c.Args, c.Env)
	return "exec", fmt.Errorf("exec %s: %w", c.Args[0], err)
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
	return "", fmt.Errorf("%s: executable file not found in $PATH: %w", name, unix.ENOENT)
}

package engine

import (
	"bytes"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/agent"
)

// defaultPath is the PATH docker gives a container whose image sets none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// lookExec finds req's command in the container's root before the
// engine is asked to exec it: an engine reports a command that is not
// there as a status of 126 with its runtime's message on the command's
// output, where a run's container that cannot start says "not found"
// (127). A bare name is looked up in the PATH of req's environment, else
// of the container's PID 1 (the container's own), else docker's default;
// an absolute path is looked up as it is. A name relative to the working
// directory is left to the engine. Only a command found nowhere fails
// (KindExec, ENOENT: exit 127, as a run's); anything else is the exec's
// to judge.
func (i *instance) lookExec(req *agent.ExecRequest) error {
	arg0 := req.Args[0]
	var candidates []string
	switch {
	case path.IsAbs(arg0):
		candidates = []string{arg0}
	case strings.Contains(arg0, "/") || arg0 == "":
		return nil
	default:
		for _, d := range strings.Split(i.execPath(req.Env), ":") {
			if path.IsAbs(d) {
				candidates = append(candidates, path.Join(d, arg0))
			}
		}
	}
	for _, c := range candidates {
		how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT}
		fd, err := unix.Openat2(i.root, c, &how)
		if err == nil {
			unix.Close(fd)
			return nil
		}
		if err != unix.ENOENT && err != unix.ENOTDIR {
			// Something is there, or the lookup itself failed: the
			// engine's exec judges it.
			return nil
		}
	}
	return &agent.ExecError{Kind: agent.KindExec, Errno: syscall.ENOENT, Msg: arg0 + ": not found in the sandbox"}
}

// execPath is the PATH an exec with env gets.
func (i *instance) execPath(env []string) string {
	for k := len(env) - 1; k >= 0; k-- {
		if v, ok := strings.CutPrefix(env[k], "PATH="); ok {
			return v
		}
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(i.pid) + "/environ"); err == nil {
		for _, kv := range bytes.Split(b, []byte{0}) {
			if v, ok := strings.CutPrefix(string(kv), "PATH="); ok {
				return v
			}
		}
	}
	return defaultPath
}

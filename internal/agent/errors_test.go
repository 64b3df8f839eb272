package agent

import (
	"encoding/json"
	"errors"
	"syscall"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestResponseError: a failed exec's response, after its trip through JSON, is
// judged by its kind and error number alone: a command that could not be
// executed maps to the sandbox error of its exit code (127 / 126), a
// sandbox that could not prepare it to neither, whatever its text says.
func TestResponseError(t *testing.T) {
	for _, c := range []struct {
		kind  string
		errno syscall.Errno
		msg   string
		is    error // the sandbox error it must match, nil: neither
		text  string
	}{
		{KindExec, syscall.ENOENT, "exec nope: executable file not found in $PATH", sandbox.ErrNotFound, "exec nope: executable file not found in $PATH: command not found"},
		{KindExec, syscall.EACCES, "exec /etc/passwd: permission denied", sandbox.ErrCannotInvoke, "exec /etc/passwd: permission denied: command cannot be invoked"},
		{KindExec, syscall.E2BIG, "exec ls: argument list too long", sandbox.ErrCannotInvoke, "exec ls: argument list too long: command cannot be invoked"},
		{KindExec, syscall.ENOEXEC, "exec ./x: exec format error", sandbox.ErrCannotInvoke, "exec ./x: exec format error: command cannot be invoked"},
		{KindExec, syscall.ELOOP, "loop", sandbox.ErrCannotInvoke, "loop: command cannot be invoked"},
		// Not execve's: the sandbox's own failure, 125 at the face.
		{KindExec, syscall.ENOMEM, "out of memory", nil, "out of memory"},
		{KindSetup, syscall.ENOENT, "joining the cgroup: no such file or directory", nil, "joining the cgroup: no such file or directory"},
		// The text alone never decides: a setup failure whose message
		// reads like a missing command is still a setup failure.
		{KindSetup, 0, "command not found", nil, "command not found"},
		{"", 0, "connection lost", nil, "connection lost"},
	} {
		b, err := json.Marshal(Response{ID: 1, Error: c.msg, Kind: c.kind, Errno: int(c.errno)})
		if err != nil {
			t.Fatal(err)
		}
		var resp Response
		if err := json.Unmarshal(b, &resp); err != nil {
			t.Fatal(err)
		}
		err = ResponseError(&resp)
		var ee *ExecError
		if !errors.As(err, &ee) || ee.Kind != c.kind || ee.Errno != c.errno {
			t.Errorf("%s %v: not an *ExecError with its fields: %#v", c.kind, c.errno, err)
		}
		if c.errno != 0 && !errors.Is(err, c.errno) {
			t.Errorf("%s %v: errors.Is(err, errno) is false", c.kind, c.errno)
		}
		for _, s := range []error{sandbox.ErrNotFound, sandbox.ErrCannotInvoke} {
			if got := errors.Is(err, s); got != (s == c.is) {
				t.Errorf("%s %v: errors.Is(err, %q) = %v", c.kind, c.errno, s, got)
			}
		}
		if err.Error() != c.text {
			t.Errorf("%s %v: message %q, want %q", c.kind, c.errno, err, c.text)
		}
	}
}

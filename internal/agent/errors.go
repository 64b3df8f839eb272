package agent

import (
	"fmt"
	"syscall"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Kinds of failure a Response reports (Response.Kind).
const (
	// KindExec: the command could not be executed; Errno says why
	// (ENOENT: not found, exit 127; EACCES, ENOEXEC, E2BIG, …: 126).
	KindExec = "exec"
	// KindSetup: the sandbox could not prepare the command or the
	// request (Errno, when set, is the failed call's).
	KindSetup = "setup"
	// KindPath: a file operation failed on its path (Errno: ENOENT for
	// a missing file, …).
	KindPath = "path"
	// KindRefused: the path is never allowed (/proc, an escape from
	// the sandbox's root).
	KindRefused = "refused"
)

// ExecError says why a command did not start: Kind KindExec when it
// could not be executed, KindSetup when the sandbox could not prepare
// it; Errno is the error number behind it (0 when none). A Sandbox's
// Exec returns one, the Server sends its fields, and ResponseError turns them
// back into one on the client's side.
type ExecError struct {
	Kind  string
	Errno syscall.Errno
	Msg   string
}

func (e *ExecError) Error() string { return e.Msg }

// Unwrap is the error number, so that errors.Is(err, unix.E2BIG) holds.
func (e *ExecError) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}

// sandboxError is the sandbox error a failure to execute the command
// stands for: sandbox.ErrNotFound (exit 127) or sandbox.ErrCannotInvoke
// (126), as execve's error numbers map to a shell's codes; nil for a
// failure that is not one to execute (the sandbox's own).
func (e *ExecError) sandboxError() error {
	if e.Kind != KindExec {
		return nil
	}
	return sandbox.ExecErrno(e.Errno)
}

// ResponseError is the error a failed exec response stands for, judged by its
// Kind and Errno: an *ExecError, wrapped, for a command that could not
// be executed, with sandbox.ErrNotFound or sandbox.ErrCannotInvoke (its
// message then ends in theirs).
func ResponseError(resp *Response) error {
	e := &ExecError{Kind: resp.Kind, Errno: syscall.Errno(resp.Errno), Msg: resp.Error}
	if s := e.sandboxError(); s != nil {
		return fmt.Errorf("%w: %w", e, s)
	}
	return e
}

package sandbox

import (
	"errors"
	"fmt"
	"syscall"
	"time"
)

var (
	// ErrNotFound means the command does not exist in the sandbox (exit 127).
	ErrNotFound = errors.New("command not found")
	// ErrCannotInvoke means the command exists but cannot be executed (exit 126).
	ErrCannotInvoke = errors.New("command cannot be invoked")
	// ErrUnsupported means a backend cannot honour a requested feature.
	ErrUnsupported = errors.New("not supported")
)

// Errors of persistent sandboxes. Implementations of Store, Supervisor
// and Connector wrap these so that every face maps them the same way
// (HTTP 404 / 409, exit 125).
var (
	// ErrSandboxNotFound means no persistent sandbox has that name.
	ErrSandboxNotFound = errors.New("sandbox not found")
	// ErrSandboxExists means the name is taken.
	ErrSandboxExists = errors.New("sandbox already exists")
	// ErrNotRunning means the sandbox exists but is stopped.
	ErrNotRunning = errors.New("sandbox is not running")
	// ErrRunning means the operation needs a stopped sandbox (or force).
	ErrRunning = errors.New("sandbox is running")
)

// ExpiredError is the error of an operation on a sandbox that had
// expired and was removed by it; it is an ErrSandboxNotFound.
type ExpiredError struct {
	Name string
	At   time.Time
}

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("%q expired at %s and was removed", e.Name, e.At.Local().Format(time.RFC3339))
}

func (e *ExpiredError) Unwrap() error { return ErrSandboxNotFound }

// NameError is an error about one of the sandboxes an operation on
// several names (Stats) was given: Name says which.
type NameError struct {
	Name string
	Err  error
}

func (e *NameError) Error() string { return e.Err.Error() }

func (e *NameError) Unwrap() error { return e.Err }

// ExecErrno is the sentinel a failed execve's error number stands for,
// as a shell maps them to exit codes: ErrNotFound (127) for ENOENT,
// ErrCannotInvoke (126) for a file that exists but cannot be executed or
// arguments that cannot be passed; nil for any other number. Every
// backend and the agent judge a failed exec by this one table.
func ExecErrno(errno syscall.Errno) error {
	switch errno {
	case syscall.ENOENT:
		return ErrNotFound
	case syscall.EACCES, syscall.ENOEXEC, syscall.EPERM, syscall.EISDIR, syscall.ENOTDIR, syscall.ELOOP, syscall.E2BIG:
		return ErrCannotInvoke
	}
	return nil
}

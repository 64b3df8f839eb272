package sandbox

import "errors"

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

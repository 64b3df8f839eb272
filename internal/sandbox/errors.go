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

package sandbox

import (
	"context"
	"io"
	"os"
)

// Stdio are the streams of the sandboxed process. When a field is an
// *os.File the backend may hand the descriptor to the process directly.
type Stdio struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Result is how a sandboxed command ended.
type Result struct {
	// ExitCode follows the shell convention: the process's code, or
	// 128+N when it was killed by signal N.
	ExitCode int
	// Signal is the signal that ended the process, 0 otherwise.
	Signal int
	// TimedOut is true when Resources.Timeout ended the sandbox.
	TimedOut bool
	// KeptAt is the path of the kept writable layer when Spec.Keep is set.
	KeptAt string
}

// Backend turns a Spec into a running sandbox.
type Backend interface {
	// Name is the backend's name as users type it ("native", "gvisor", …).
	Name() string
	// Run runs spec.Args to completion in a fresh sandbox and removes the
	// sandbox afterwards (unless spec.Keep). A non-nil error means the
	// sandbox could not be set up or the command could not be started;
	// errors wrapping ErrNotFound / ErrCannotInvoke map to 127 / 126.
	Run(ctx context.Context, spec *Spec, stdio Stdio) (Result, error)
}

// Anticipator is a Backend that can start on what Run(spec) will need
// (a cgroup, say) while the Manager still prepares the spec's root
// filesystem. Anticipate returns a function that undoes that work, for
// when Run(spec) will not come; after Run it does nothing.
type Anticipator interface {
	Anticipate(spec *Spec) (forget func())
}

// Preparer is a Backend that can build a sandbox ahead of its command
// (the warm pools, pool.go).
type Preparer interface {
	// Prepare builds a sandbox for spec up to the start of its command
	// (spec.Args are ignored) and returns once it is ready.
	Prepare(ctx context.Context, spec *Spec) (Prepared, error)
}

// Prepared is a sandbox waiting for its one command.
type Prepared interface {
	// Run runs args to completion as Backend.Run would, forwarding the
	// signals that arrive on sigs (may be nil), and removes the sandbox.
	Run(ctx context.Context, args []string, stdio Stdio, sigs <-chan os.Signal) (Result, error)
	// Close discards a sandbox that was not run.
	Close()
	// Warnings are what a direct run would have warned about while
	// building the same sandbox (for example: no cgroup limits).
	Warnings() []string
}

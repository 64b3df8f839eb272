package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrCommandRefused means a sandbox's command rules ([security.commands])
// do not allow the program. Errors that wrap it also wrap ErrCannotInvoke,
// so every face maps them to exit code 126 (HTTP 409 with exit_code 126,
// an MCP isError result).
var ErrCommandRefused = errors.New("refused by [security.commands]")

// CommandRules are the [security.commands] rules of a sandbox: which
// programs may be started as a command's argv[0]. They are resolved into
// the Spec (policy.Resolve) and checked by the Manager on every path that
// starts a command: Run, Exec (exec, attach), and a prepared sandbox's Run
// (warm pools, the daemon). They are a guard-rail against accidental use,
// not a boundary: 'sh -c "curl …"' starts sh.
type CommandRules struct {
	// Allow lists programs that may run, by name or absolute path.
	Allow []string `json:"allow,omitempty"`
	// Block lists programs that may not run (block wins over Allow).
	Block []string `json:"block,omitempty"`
	// AllowlistOnly refuses every program not in Allow.
	AllowlistOnly bool `json:"allowlist_only,omitempty"`
	// BlockFrom and AllowFrom say where Block and Allow/AllowlistOnly
	// were set ("/home/u/proj/agentkernel.toml:12"), for the messages.
	BlockFrom string `json:"block_from,omitempty"`
	AllowFrom string `json:"allow_from,omitempty"`
}

// CommandRefusedError is a command the rules do not allow.
type CommandRefusedError struct {
	// Command is the program as given (the first word of argv[0]).
	Command string
	// Blocked is true when Block matched; false when AllowlistOnly
	// refused a program missing from Allow.
	Blocked bool
	// From is where the deciding rule was set ("" when unknown).
	From string
	// Sandbox names the persistent sandbox whose rules refused the
	// command ("" for a fresh sandbox).
	Sandbox string
}

func (e *CommandRefusedError) Error() string {
	var b strings.Builder
	if e.Sandbox != "" {
		fmt.Fprintf(&b, "sandbox %s: ", e.Sandbox)
	}
	if e.Blocked {
		fmt.Fprintf(&b, "command %q is blocked by [security.commands] block", e.Command)
	} else {
		fmt.Fprintf(&b, "command %q is not in [security.commands] allow, and allowlist_only = true", e.Command)
	}
	switch {
	case e.From != "" && e.Sandbox != "":
		fmt.Fprintf(&b, " (set in %s when the sandbox was created)", e.From)
	case e.From != "":
		fmt.Fprintf(&b, " (set in %s)", e.From)
	case e.Sandbox != "":
		b.WriteString(" (the rules the sandbox was created with)")
	}
	return b.String()
}

// Unwrap makes the error match ErrCommandRefused and ErrCannotInvoke.
func (e *CommandRefusedError) Unwrap() []error {
	return []error{ErrCommandRefused, ErrCannotInvoke}
}

// Check applies the rules to args[0]: its first word, compared with each
// list entry as given and by its base name. nil rules and an empty args
// (the image's entrypoint) allow everything.
func (r *CommandRules) Check(args []string) error {
	if r == nil || len(args) == 0 {
		return nil
	}
	if len(r.Block) == 0 && !r.AllowlistOnly {
		return nil
	}
	fields := strings.Fields(args[0])
	if len(fields) == 0 {
		return nil
	}
	full := fields[0]
	base := filepath.Base(full)
	match := func(list []string) bool {
		return slices.Contains(list, full) || slices.Contains(list, base)
	}
	if match(r.Block) {
		return &CommandRefusedError{Command: full, Blocked: true, From: r.BlockFrom}
	}
	if r.AllowlistOnly && !match(r.Allow) {
		return &CommandRefusedError{Command: full, From: r.AllowFrom}
	}
	return nil
}

// checkedPrepared refuses a prepared sandbox's command that its spec's
// rules do not allow; the refused sandbox is discarded.
type checkedPrepared struct {
	Prepared
	rules *CommandRules
}

func (p checkedPrepared) Run(ctx context.Context, args []string, stdio Stdio, sigs <-chan os.Signal) (Result, error) {
	if err := p.rules.Check(args); err != nil {
		p.Prepared.Close()
		return Result{}, err
	}
	return p.Prepared.Run(ctx, args, stdio, sigs)
}

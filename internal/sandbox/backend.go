package sandbox

import (
	"context"
	"io"
	"os"
	"strconv"
	"strings"
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
	// OOMKills is how many of the sandbox's processes the kernel's OOM
	// killer ended because the sandbox reached Resources.MemoryMB (0
	// without a memory limit, or where the backend cannot tell).
	OOMKills int
	// MemoryMB is the memory limit OOMKills happened under, in MiB (set
	// with OOMKills).
	MemoryMB int64
	// KeptAt is the path of the kept writable layer when Spec.Keep is set.
	KeptAt string
	// NetworkDenials are the connections and names the network policy
	// refused during the run, deduplicated.
	NetworkDenials []NetworkDenial
	// NetworkSummary is one line naming what the network policy refused
	// and the flags that would allow it; "" when nothing was.
	NetworkSummary string
	// SecretInjections are the secrets the egress stack added to the
	// sandbox's requests, by secret and host (names, never values).
	SecretInjections []SecretInjection
}

// CommandOOMKilled is true when the memory limit's OOM killer ended the
// command itself: it died of SIGKILL while processes of the sandbox were
// killed for memory.
func (r Result) CommandOOMKilled() bool {
	return r.OOMKills > 0 && r.Signal == sigKill
}

// sigKill is SIGKILL's number, the same on every system agentkernel
// builds for.
const sigKill = 9

// OOMText says what the memory limit's OOM killer ended, in one line
// without a trailing newline: "the command was killed: out of memory
// (limit 64 MiB)" when it ended the command, "a process in the sandbox
// was killed: …" (or "N processes …") when it ended others; "" when it
// ended none.
func (r Result) OOMText() string {
	if r.OOMKills <= 0 {
		return ""
	}
	what := "the command was killed"
	switch {
	case r.CommandOOMKilled():
	case r.OOMKills == 1:
		what = "a process in the sandbox was killed"
	default:
		what = strconv.Itoa(r.OOMKills) + " processes in the sandbox were killed"
	}
	return what + ": out of memory (limit " + memoryText(r.MemoryMB) + ")"
}

// AppendNote appends agentkernel's note (such as OOMText or
// NetworkSummary) to a command's output as a line of its own:
// "agentkernel: NOTE\n"; output as it is when note is "".
func AppendNote(output, note string) string {
	if note == "" {
		return output
	}
	if output != "" && !strings.HasSuffix(output, "\n") {
		output += "\n"
	}
	return output + "agentkernel: " + note + "\n"
}

// memoryText writes a memory limit in MiB for people: "512 MiB", "2 GiB";
// "unknown" for 0.
func memoryText(mb int64) string {
	switch {
	case mb <= 0:
		return "unknown"
	case mb >= 1024 && mb%1024 == 0:
		return strconv.FormatInt(mb/1024, 10) + " GiB"
	}
	return strconv.FormatInt(mb, 10) + " MiB"
}

// NetworkDenial is a connection or name a sandbox's network policy
// refused.
type NetworkDenial struct {
	// Kind is what was refused: "dns", "tcp", "udp", "sni" or "host".
	Kind string `json:"kind"`
	// Name is the host name involved, if any.
	Name string `json:"name,omitempty"`
	// Addr is the address (and port) involved, if any.
	Addr string `json:"addr,omitempty"`
	// Reason says why, in words.
	Reason string `json:"reason"`
	// Hint is the flag that would allow it ("--allow-domain example.com").
	Hint string `json:"hint,omitempty"`
	// Count is how many times it was refused.
	Count int `json:"count,omitempty"`
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

// Checker is a Backend that can tell, before the root filesystem is
// prepared (an image pulled), that it cannot run spec: Manager.Run asks
// it first, so that a run it refuses fails at once.
type Checker interface {
	Check(spec *Spec) error
}

// LoopbackOnly is a Backend whose sandboxes have loopback only: no
// network egress and no published ports (gvisor, so far). A face keeps
// an explicit request for egress (a --network flag, network in
// configuration, published ports) off such a backend with an error, and
// runs a profile's default egress on loopback with one warning.
type LoopbackOnly interface {
	LoopbackOnly() bool
}

// Remote is a Backend whose sandboxes run on other machines (the jobs
// of an orchestrator): their images are fetched where they run, so the
// Manager prepares no root filesystem for them, and nothing of their
// files is on this host, so the Manager refuses what needs it (a
// snapshot) with ErrUnsupported, in the words Remote returns: what the
// sandboxes are ("a Nomad job").
type Remote interface {
	Remote() string
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

// What a backend offers to host persistent sandboxes. The supervisor
// (package supervisor) holds a persistent sandbox through these
// interfaces only, so that it never imports a backend: the face wires
// the backend in. The native backend implements all of them
// (PersistentBackend).

// PersistentBackend is a backend that can host persistent sandboxes.
type PersistentBackend interface {
	Booter
	Reclaimer
	Meter
}

// Booter starts persistent sandboxes.
type Booter interface {
	// Boot starts the persistent sandbox spec describes, its writable
	// layer in dir (created when missing, kept from one boot to the
	// next), its own diagnostics written to log, and returns once the
	// sandbox is ready for commands. The sandbox lives while the caller
	// holds the Instance: it ends when the caller exits.
	Boot(ctx context.Context, spec *Spec, dir string, log *os.File) (Instance, error)
}

// Instance is a running persistent sandbox as the process that booted
// it (its supervisor) holds it. Where the backend's Instance also
// implements agent.Sandbox (package agent), the supervisor serves the
// sandbox's commands, files and stats itself, from outside the sandbox.
type Instance interface {
	// Done is closed once the sandbox has ended.
	Done() <-chan struct{}
	// ExitReason says how it ended, after Done: "" when it stopped
	// because it was asked to.
	ExitReason() string
	// Kill ends the sandbox at once.
	Kill()
	// Close waits until the sandbox has ended, then releases what it
	// held on the host (its cgroup, descriptors).
	Close()
}

// CgroupRemover removes what cgroups a backend's persistent sandbox
// left on the host once its supervisor is gone.
type CgroupRemover interface {
	// RemoveCgroups removes the cgroups of the sandbox whose backend id
	// is id (Spec.ID), with whatever still runs in them, and returns
	// the directories it removed.
	RemoveCgroups(id string) []string
}

// Reclaimer frees what persistent sandboxes hold on the host outside
// their directories: cgroups left by a supervisor that was killed, and
// the blocks of host ids reserved for them.
type Reclaimer interface {
	CgroupRemover
	// ReleaseIDs frees the host ids reserved for the sandbox spec
	// describes, whose files live in dir (when it is removed).
	ReleaseIDs(spec *Spec, dir string) error
	// ReleaseOrphanedIDs frees the host ids reserved for sandboxes that
	// no longer exist (known maps each existing sandbox's name to its
	// backend id) and returns what it freed; with dryRun it only says
	// what it would free.
	ReleaseOrphanedIDs(known map[string]string, dryRun bool) ([]string, error)
}

// Meter reads a sandbox's resource use as the host sees it.
type Meter interface {
	// Measure returns the memory in use, the CPU time and the process
	// count of the sandbox whose backend id is id (Usage's MemoryBytes,
	// CPUSeconds and Pids); false when the backend has no figures for
	// it (no cgroup).
	Measure(id string) (Usage, bool)
}

package native

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Options configure a Backend.
type Options struct {
	// DataDir is agentkernel's data directory; the backend keeps run state
	// (kept upper dirs, crash markers) under DataDir/runs.
	DataDir string
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
	// Warn prints one line to the user (e.g. a protection this host
	// lacks and AllowDegraded let the run go without); nil discards
	// warnings.
	Warn func(string)
	// AllowDegraded returns the protections ([security] allow_degraded:
	// config.DegradeCgroups, config.DegradeLandlock) a sandbox may go
	// without where this host cannot give them, with one warning; a
	// missing protection not named fails the run or boot
	// (*DegradedError, ladder.go). Asked only when one is missing (the
	// caller may load its configuration after making the backend); nil
	// allows none.
	AllowDegraded func() []string
	// NetHelper is the agentkernel-full binary that serves a sandbox's
	// network (package netproc); empty: the one fullbin.Path finds.
	NetHelper string
	// OnNetworkDeny, when set, is told each distinct refusal of a
	// persistent sandbox's network policy as it happens (a run's come
	// back in its Result instead).
	OnNetworkDeny func(spec *sandbox.Spec, d sandbox.NetworkDenial)
	// OnSecretInjections, when set, is told which secrets a persistent
	// sandbox's network helper added to which hosts' requests (names and
	// counts), when the helper ends with the sandbox (a run's come back
	// in its Result instead).
	OnSecretInjections func(spec *sandbox.Spec, is []sandbox.SecretInjection)
}

// Backend is the embedded Linux backend: namespaces, an overlay root,
// cgroups, capabilities, seccomp and Landlock, with this binary re-executed
// as the sandbox's init. A Backend holds no per-run state; it is safe for
// concurrent use.
type Backend struct {
	opts Options
	log  *slog.Logger
	// goExecStage makes the init use the Go exec stage even where the
	// assembled stub exists (tests cover both).
	goExecStage bool
	// bg counts prepared sandboxes still being torn down after Run.
	bg sync.WaitGroup
	// early holds the cgroups Anticipate started, by *sandbox.Spec.
	early sync.Map
	// cgOwner tags the cgroups this backend makes with its data
	// directory (dataDirTag), for GC.
	cgOwner string
}

// New returns a native backend.
func New(opts Options) *Backend {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Warn == nil {
		opts.Warn = func(string) {}
	}
	return &Backend{opts: opts, log: log, cgOwner: dataDirTag(opts.DataDir)}
}

// Name returns "native".
func (b *Backend) Name() string { return "native" }

// dataDirTag names a data directory in its sandboxes' cgroup names: "d"
// and 8 hex digits of the SHA-256 of its absolute path; "" for none.
func dataDirTag(dataDir string) string {
	if dataDir == "" {
		return ""
	}
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	sum := sha256.Sum256([]byte(dataDir))
	return "d" + hex.EncodeToString(sum[:4])
}

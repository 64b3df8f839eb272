package gvisor

import (
	"os"
	"path/filepath"
	"sync"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// BackendName is the backend's name as users type it (-B gvisor).
const BackendName = "gvisor"

// RunscVersion is the gVisor module version of the runsc this backend is
// built and tested against (scripts/runsc.sh builds it).
const RunscVersion = "v0.0.0-20260905035102-160fafc42237"

// Environment variables that say where runsc is.
const (
	// RunscEnv names the runsc binary to use.
	RunscEnv = "AGENTKERNEL_RUNSC"
	// RunscCacheEnv is the cache directory scripts/runsc.sh builds into.
	RunscCacheEnv = "AGENTKERNEL_RUNSC_CACHE"
	// DebugLogEnv names a directory where runsc writes its debug logs
	// (runsc --debug --debug-log), one file per runsc process.
	DebugLogEnv = "AGENTKERNEL_GVISOR_DEBUG_LOG"
)

// Options configure the backend.
type Options struct {
	// DataDir holds the runs' bundles (<DataDir>/gvisor).
	DataDir string
	// Warn prints one line for the user.
	Warn func(string)
	// NetHelper is the agentkernel-full binary that serves a sandbox's
	// network (package netproc); empty: found with fullbin.Path.
	NetHelper string
	// OnNetworkDeny, when set, is told each distinct refusal of a
	// persistent sandbox's network policy as it happens (a run's are in
	// its result).
	OnNetworkDeny func(spec *sandbox.Spec, d sandbox.NetworkDenial)
	// OnSecretInjections, when set, is told which secrets a persistent
	// sandbox's network helper added to which hosts' requests (names
	// and counts), when the sandbox ends (a run's are in its result).
	OnSecretInjections func(spec *sandbox.Spec, is []sandbox.SecretInjection)
}

// Backend runs sandboxes under gVisor's runsc.
type Backend struct {
	opts Options
	// bg counts the teardowns of pooled runs' sandboxes (Drain).
	bg sync.WaitGroup
	// noScratchXattr makes memScratch's probe of the scratch tmpfs
	// fail as on a kernel whose tmpfs has no extended attributes, so
	// that runs take the on-disk layout: the tests' way there on a
	// kernel whose tmpfs has them.
	noScratchXattr bool
}

// New returns the gvisor backend.
func New(opts Options) *Backend {
	if opts.Warn == nil {
		opts.Warn = func(string) {}
	}
	if opts.DataDir != "" {
		// runsc is given the bundle's paths, which must not depend on
		// its working directory (a relative --data-dir).
		if abs, err := filepath.Abs(opts.DataDir); err == nil {
			opts.DataDir = abs
		}
	}
	return &Backend{opts: opts}
}

// Name is "gvisor".
func (b *Backend) Name() string { return BackendName }

// LoopbackOnly: the sandboxes get the network their spec asks for, as
// native's do (sandbox.LoopbackOnly).
func (b *Backend) LoopbackOnly() bool { return false }

// RunscCachePath is where scripts/runsc.sh puts runsc for this user:
// under $AGENTKERNEL_RUNSC_CACHE, else /var/cache/agentkernel as root,
// else the user's cache directory.
func RunscCachePath() string {
	cache := os.Getenv(RunscCacheEnv)
	if cache == "" {
		if os.Geteuid() == 0 {
			cache = "/var/cache/agentkernel"
		} else {
			dir := os.Getenv("XDG_CACHE_HOME")
			if dir == "" {
				home := os.Getenv("HOME")
				if home == "" {
					home = "/tmp"
				}
				dir = filepath.Join(home, ".cache")
			}
			cache = filepath.Join(dir, "agentkernel")
		}
	}
	return filepath.Join(cache, "runsc-"+RunscVersion, "runsc")
}

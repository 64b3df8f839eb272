package native

import (
	"github.com/agentkernel/agentkernel/internal/backend/native/idrange"
	"github.com/agentkernel/agentkernel/internal/backend/native/stub"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Hidden modes of the re-executed binary are selected by argv[0], so that
// nothing leaks into the sandboxed command's environment and ps shows what
// each process is.
const (
	argv0Init = stub.Argv0Init
	argv0Exec = "agentkernel:exec"
)

// File descriptors shared between the stages. The parent hands fd 3 (a
// socketpair end: config in, result out) and fd 4 (the error pipe) to the
// init; the init hands fd 3 (a pipe with the exec config) and fd 4 (the same
// error pipe, close-on-exec there) to the exec stage.
const (
	fdConfig = 3
	fdErr    = 4
)

// subIDSize is how many ids a root caller's sandbox maps: sandbox ids
// 0…subIDSize-1 are host ids RootUID…RootUID+subIDSize-1, a block of
// its own (package idrange).
const subIDSize = idrange.Size

// initConfig is what the parent sends to the init. It is small on purpose:
// the init decodes it on every run.
type initConfig struct {
	ID       string `json:"id"`
	Hostname string `json:"hostname,omitempty"`
	// Network: the sandbox has egress, through a TUN device the network
	// stage creates (its other end is the owner's network helper, package
	// netproc) and the resolver resolv.conf names.
	Network bool `json:"network,omitempty"`
	// TrustCA is the CA certificate (PEM) of the sandbox's secret
	// injection, added to its trust store (writeTrustBundle); its key
	// stays with the owner.
	TrustCA []byte `json:"trust_ca,omitempty"`
	// TrustCAHash is OpenSSL's subject hash of TrustCA (8 hex digits):
	// its name in the sandbox's SSL_CERT_DIR (writeCertDir).
	TrustCAHash string `json:"trust_ca_hash,omitempty"`
	// SecretFiles are the files of run --secret-file
	// (writeSecretFiles); their values reach the init in this message
	// only, in memory.
	SecretFiles []sandbox.SecretFile `json:"secret_files,omitempty"`
	// Rootless: the init already runs in a user namespace of its own (the
	// caller's uid is root there) and execs the command without another one.
	Rootless bool `json:"rootless,omitempty"`
	// SubIDs (rootless): the init's user namespace also maps the caller's
	// subordinate ids (subids_linux.go); it is cloned with no map and
	// waits for 'M' (mapped) or 'S' (only the caller: setgroups denied)
	// before anything else.
	SubIDs bool `json:"sub_ids,omitempty"`
	// NestUserNS: the command gets its own user namespace mapping 0 to
	// RootUID (root caller, no --userns=host).
	NestUserNS bool `json:"nest_userns,omitempty"`
	// RootUID/RootGID are the ids, as the init sees them, of the sandbox's
	// root: new tmpfs mounts and directories the sandbox should own get them.
	// For a root caller they are the first ids of the sandbox's own block
	// (idrange), which image layers and host directories are idmapped into.
	RootUID int `json:"root_uid"`
	RootGID int `json:"root_gid"`
	// OwnerUID/OwnerGID are the invoking user's host ids: the sandbox's
	// root stands for them in writable host directories (bindns_linux.go).
	OwnerUID int `json:"owner_uid,omitempty"`
	OwnerGID int `json:"owner_gid,omitempty"`

	Layers []string `json:"layers,omitempty"`
	Host   bool     `json:"host,omitempty"`
	// Upper is a host directory holding upper/ and work/ (--keep); empty
	// means a tmpfs of DiskMB megabytes.
	Upper string `json:"upper,omitempty"`
	// CowDir is a host directory holding cow<i>/upper and cow<i>/work,
	// the writable layers of copy-on-write volumes (Mounts[i]) of a
	// persistent sandbox, kept across its starts; empty means the
	// scratch tmpfs (a run's).
	CowDir       string          `json:"cow_dir,omitempty"`
	DiskMB       int64           `json:"disk_mb,omitempty"`
	ReadOnlyRoot bool            `json:"ro_root,omitempty"`
	Mounts       []sandbox.Mount `json:"mounts,omitempty"`
	// Cgroups are v1 cgroup directories. The parent moves the init in
	// while it boots; the init then moves its exec stage, which it forked
	// before that finished.
	Cgroups []string `json:"cgroups,omitempty"`

	Exec execConfig `json:"exec"`
	// GoExecStage: re-execute agentkernel as the exec stage instead of the
	// assembled stub.
	GoExecStage bool `json:"go_exec,omitempty"`
	// Persistent: the init does not run one command and exit; it stays
	// PID 1 and serves agent requests (exec, files, stop) on fd 3
	// (persist_linux.go).
	Persistent bool `json:"persistent,omitempty"`
	// Deferred: the init builds the whole sandbox, says 'R' on fd 3 and
	// waits there for the command ('A' and a JSON argv) before it starts
	// the command (Prepare, prepare_linux.go).
	Deferred bool `json:"deferred,omitempty"`
	// Trace makes the init print a timestamp after each stage to stderr
	// (AGENTKERNEL_TRACE_STAGES=1 in the parent's environment).
	Trace bool `json:"trace,omitempty"`
}

// execConfig is what the init sends to the exec stage: the last steps
// before execve.
type execConfig struct {
	Args    []string `json:"args"`
	Env     []string `json:"env"`
	Workdir string   `json:"workdir"`
	// User is the unresolved user spec; the init resolves it against the
	// sandbox's /etc/passwd and fills UID/GID/Groups.
	User   string `json:"user,omitempty"`
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
	Groups []int  `json:"groups,omitempty"`
	TTY    bool   `json:"tty,omitempty"`
	// NoSetgroups: the user namespace forbids setgroups (rootless).
	NoSetgroups bool     `json:"no_setgroups,omitempty"`
	Caps        []string `json:"caps,omitempty"`
	// Seccomp is the profile name ("" or "unconfined": none).
	Seccomp    string `json:"seccomp,omitempty"`
	NoNewPrivs bool   `json:"nnp,omitempty"`
	Landlock   bool   `json:"landlock,omitempty"`
	// LandlockRW are the paths the command may write when Landlock is on
	// (the writable volumes). LandlockRootRW: the root has a writable
	// layer, and Landlock lets the command write anywhere in it, top level
	// included (llRootRW), as the layer itself does; a read-only root
	// gets read and execute only.
	LandlockRW     []string `json:"landlock_rw,omitempty"`
	LandlockRootRW bool     `json:"landlock_root_rw,omitempty"`
	// Filter is the compiled seccomp program (sock_filter array), built by
	// the parent while the init boots.
	Filter []byte `json:"filter,omitempty"`
	// ExtraSeccomp adds the setuid/setgid-creation and xattr blocks needed
	// when a host directory is idmapped writable into the sandbox.
	ExtraSeccomp bool `json:"extra_seccomp,omitempty"`
	// RecvStdio: the stub receives the command's stdio after its script
	// (prepared sandboxes, stubRecvStdio).
	RecvStdio bool `json:"recv_stdio,omitempty"`
	// SandboxPTY: the command's terminal (TTY) is a pty of the sandbox's
	// own devpts, which the builder opens once the root is in place and
	// sends the stub as its stdio (the master goes to the parent), so
	// that the command's /dev/pts/N exists inside. Thread-built runs.
	SandboxPTY bool `json:"sandbox_pty,omitempty"`
	// Rows and Cols are the caller's terminal's size when the run
	// starts: the sandbox's pty has it before the command runs (the
	// parent, which gets the master once the command may already run,
	// follows later changes).
	Rows   uint16 `json:"rows,omitempty"`
	Cols   uint16 `json:"cols,omitempty"`
	NoFile uint64 `json:"nofile,omitempty"`
	// filterLoaded: the stub loaded Filter in its first script
	// (initState.earlyFilter), so its last one does not.
	filterLoaded bool
	// inRoot: the script is built outside the sandbox (a persistent
	// sandbox's supervisor): paths are looked up below rootFd.
	inRoot bool
	rootFd int
	// path is the command's resolved path, for the exec step
	// (execSteps).
	path string
	// umask, when setUmask, is set by the armed exec stage (the
	// supervisor's umask at boot, Instance.umask); otherwise the command
	// inherits its starter's.
	umask    int
	setUmask bool
}

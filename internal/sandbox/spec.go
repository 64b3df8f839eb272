package sandbox

import (
	"time"

	"github.com/agentkernel/agentkernel/internal/config"

	image "github.com/agentkernel/agentkernel/internal/image/cache"
)

// Spec is everything a backend needs to run one sandbox. It is fully
// resolved: a backend never re-interprets a profile or mode name, it only
// applies the fields below.
type Spec struct {
	// ID is unique per sandbox (ephemeral runs get a random one); backends
	// use it to name cgroups, scratch directories and markers.
	ID string `json:"id"`
	// Name is the user-facing name of a persistent sandbox ("" for run).
	Name string `json:"name,omitempty"`
	// Backend is the backend a persistent sandbox runs on, as its
	// supervisor finds it ("" is native); set by Manager.Create.
	Backend string `json:"backend,omitempty"`

	// Image is the reference the user asked for or detection chose, and
	// ImageRule says which rule chose it ("flag", "config", "command", ...).
	Image     string `json:"image"`
	ImageRule string `json:"image_rule,omitempty"`
	// RequestedImage is set when the image could not be had and the
	// host's own tools run instead: Image is then "host" and this is the
	// image that was asked for.
	RequestedImage string `json:"requested_image,omitempty"`
	// Pull is the pull policy: "missing" (default), "always" or "never".
	Pull string `json:"pull,omitempty"`
	// Rootfs is filled by the image store before the backend runs.
	Rootfs image.Rootfs `json:"rootfs"`

	// Args is the command. Empty means: use the image's Entrypoint+Cmd.
	Args []string `json:"args"`
	// Env is the environment added on top of the image's Env (KEY=VALUE).
	Env []string `json:"env,omitempty"`
	// Workdir inside the sandbox; "" means the image's WorkingDir or "/".
	Workdir string `json:"workdir,omitempty"`
	// User is "uid[:gid]" or a name from the image's /etc/passwd; "" means
	// the image's User, else root.
	User     string `json:"user,omitempty"`
	Hostname string `json:"hostname"`

	// TTY allocates a pseudo-terminal; Interactive keeps stdin open.
	TTY         bool `json:"tty,omitempty"`
	Interactive bool `json:"interactive,omitempty"`

	Profile string `json:"profile"`
	Mode    string `json:"mode"`

	// Mounts are applied in order after the root filesystem is ready.
	Mounts []Mount `json:"mounts,omitempty"`
	// ReadOnlyRoot makes the root filesystem read-only (with a tmpfs /tmp).
	ReadOnlyRoot bool `json:"read_only_root,omitempty"`

	Network   Network   `json:"network"`
	Resources Resources `json:"resources"`
	Security  Security  `json:"security"`
	// Commands are the [security.commands] rules every command started in
	// this sandbox is checked against (Manager.Run, Exec, prepared runs).
	// policy.Resolve always sets them; nil means a spec from before the
	// rules were recorded (a persistent sandbox created by an older
	// version), whose commands are not checked.
	Commands *CommandRules `json:"commands,omitempty"`

	// Keep leaves the writable layer in place after an ephemeral run.
	Keep bool `json:"keep,omitempty"`

	// Secrets are the secrets the egress stack adds to the requests for
	// their hosts (run -S). Never serialized: values stay in memory.
	Secrets *Secrets `json:"-"`
	// SecretBindings are a persistent sandbox's secret bindings as
	// recorded (sandbox create -S): names, hosts and headers, never a
	// value; its supervisor resolves them into Secrets at each start.
	SecretBindings *SecretBindings `json:"secret_bindings,omitempty"`
	// SSH, set on a persistent sandbox (sandbox create --ssh), makes its
	// supervisor serve SSH on 127.0.0.1 (package sshd).
	SSH *SSHAccess `json:"ssh,omitempty"`
}

// SSHAccess is how a persistent sandbox is reached over SSH.
type SSHAccess struct {
	// User is the login name and the principal of the certificates
	// ("sandbox" when empty); commands run as the sandbox's user.
	User string `json:"user,omitempty"`
}

// MountKind says how a host path appears inside the sandbox.
type MountKind string

const (
	// MountBind is a bind mount of a host path (ReadOnly decides rw/ro).
	MountBind MountKind = "bind"
	// MountCopyOnWrite shows a host directory through an overlay whose
	// upper layer lives in the sandbox: writes never reach the host.
	MountCopyOnWrite MountKind = "cow"
	// MountTmpfs mounts an empty tmpfs (Source is ignored).
	MountTmpfs MountKind = "tmpfs"
)

// Mount is one host path (or tmpfs) made visible in the sandbox.
type Mount struct {
	Kind     MountKind `json:"kind"`
	Source   string    `json:"source,omitempty"` // absolute host path
	Dest     string    `json:"dest"`             // absolute sandbox path
	ReadOnly bool      `json:"read_only,omitempty"`
	// Create: the backend makes Source (a directory, mode 0700) when it
	// does not exist (the caches of run --cache).
	Create bool `json:"create,omitempty"`
	// Layers are read-only layers stacked over Source in a copy-on-write
	// mount, lowest first, under its writable layer: the snapshots of
	// that layer a restored (or snapshotted) persistent sandbox carries.
	// They have the image layers' ownership (Rootfs.IDMap's rule, with
	// no shift: a file the sandbox sees as uid N is N on disk, as root).
	Layers []string `json:"layers,omitempty"`
}

// NetworkMode is the coarse network policy of a sandbox.
type NetworkMode string

const (
	// NetworkNone gives the sandbox its own network namespace with only
	// loopback up.
	NetworkNone NetworkMode = "none"
	// NetworkFiltered gives egress only to the names in AllowDomains (and
	// the ranges in AllowCIDRs): the sandbox's resolver answers NXDOMAIN
	// for every other name, and a connection is refused unless its address
	// came from resolving an allowed name. Private ranges (RFC 1918, ULA,
	// CGNAT) are refused unless AllowCIDRs lists them.
	NetworkFiltered NetworkMode = "filtered"
	// NetworkFull gives egress to every name and address except those in
	// BlockDomains and the ranges refused in every mode.
	NetworkFull NetworkMode = "full"
)

// Egress reports whether the mode lets traffic leave the sandbox.
func (m NetworkMode) Egress() bool { return m == NetworkFiltered || m == NetworkFull }

// Network is the resolved network policy. In every mode with egress,
// cloud metadata endpoints, link-local addresses and the host's own
// addresses are refused unless AllowCIDRs names them.
type Network struct {
	Mode         NetworkMode `json:"mode"`
	AllowDomains []string    `json:"allow_domains,omitempty"`
	BlockDomains []string    `json:"block_domains,omitempty"`
	// AllowCIDRs are address ranges a sandbox may reach by address, without
	// a name (and, in filtered mode, the private ranges it may reach).
	AllowCIDRs []string `json:"allow_cidrs,omitempty"`
	// AllowUDP lists "HOST:PORT" or "CIDR:PORT" UDP destinations other
	// than DNS that the sandbox may send to; UDP is otherwise refused.
	AllowUDP []string `json:"allow_udp,omitempty"`
	// AllowlistOnly is [security.domains].allowlist_only as configured; it
	// selects NetworkFiltered.
	AllowlistOnly bool `json:"allowlist_only,omitempty"`
	// Ports are the ports published from the host into the sandbox.
	Ports []PortMapping `json:"ports,omitempty"`
}

// PortMapping publishes a sandbox port on the host
// (config.ParsePortMapping reads it).
type PortMapping = config.PortMapping

// Resources are the limits of a sandbox. Zero means unlimited.
type Resources struct {
	MemoryMB int64 `json:"memory_mb,omitempty"`
	PIDs     int64 `json:"pids,omitempty"`
	// CPUPercent is the CPU quota in percent of one core (150 = 1.5 cores).
	CPUPercent int64         `json:"cpu_percent,omitempty"`
	DiskMB     int64         `json:"disk_mb,omitempty"`
	Timeout    time.Duration `json:"timeout,omitempty"`
}

// SeccompProfile names one of the built-in seccomp filters.
type SeccompProfile string

const (
	// SeccompDefault is docker's default profile.
	SeccompDefault SeccompProfile = "default"
	// SeccompNoPtrace is docker's default profile with ptrace also blocked.
	SeccompNoPtrace SeccompProfile = "default-no-ptrace"
	// SeccompAllowlist permits only an explicit allow-list of syscalls.
	SeccompAllowlist SeccompProfile = "allowlist"
	// SeccompUnconfined installs no filter (never chosen by a profile).
	SeccompUnconfined SeccompProfile = "unconfined"
)

// Security holds the in-kernel fences of a sandbox.
type Security struct {
	// Capabilities kept inside the sandbox, e.g. "CAP_CHOWN".
	Capabilities []string       `json:"capabilities"`
	Seccomp      SeccompProfile `json:"seccomp"`
	NoNewPrivs   bool           `json:"no_new_privs"`
	// Landlock adds a Landlock ruleset where the kernel supports it.
	Landlock bool `json:"landlock"`
	// HostUserNS runs without a private user namespace (--userns=host).
	HostUserNS bool `json:"host_userns,omitempty"`
}

package config

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// FileName is the project configuration file looked up in the working
// directory.
const FileName = "agentkernel.toml"

// Config is the effective configuration: defaults, then the user file,
// then the project file, each value overriding the one before it. The toml
// tags are the file's keys.
type Config struct {
	Sandbox      Sandbox      `toml:"sandbox"`      // [sandbox]
	Agent        Agent        `toml:"agent"`        // [agent]
	Resources    Resources    `toml:"resources"`    // [resources]
	Security     Security     `toml:"security"`     // [security], [security.domains], [security.commands]
	Network      Network      `toml:"network"`      // [network]
	Files        []File       `toml:"files"`        // [[files]]
	Build        Build        `toml:"build"`        // [build]
	Secrets      Secrets      `toml:"secrets"`      // [secrets]
	API          API          `toml:"api"`          // [api]
	MCP          MCP          `toml:"mcp"`          // [mcp]
	Daemon       Daemon       `toml:"daemon"`       // [daemon], [daemon.agents.<mode>]
	Cache        Cache        `toml:"cache"`        // [cache]
	Orchestrator Orchestrator `toml:"orchestrator"` // [orchestrator]

	// Sources says where each value came from, by dotted key
	// ("resources.memory_mb", "files[0].dest", "daemon.agents.claude.runtime").
	// Keys that no file set have no entry (Source says SourceDefault).
	Sources map[string]Source `toml:"-"`
	// Loaded lists the files that were read, lowest precedence first
	// (Line is 0).
	Loaded []Source `toml:"-"`
}

// Sandbox is [sandbox].
type Sandbox struct {
	// Name is the sandbox name for persistent sandboxes (optional).
	Name string `toml:"name"`
	// Runtime is a shorthand for an image (see detect.Shorthands).
	Runtime string `toml:"runtime"`
	// BaseImage names the image; it wins over Runtime.
	BaseImage string `toml:"base_image"`
	// Backend is the backend runs and sandboxes get when -B names none
	// (BackendNames; "" is native). Lower-cased at load.
	Backend string `toml:"backend"`
}

// Agent is [agent].
type Agent struct {
	// Preferred is the agent this project is used with (informational).
	Preferred string `toml:"preferred"`
	// CompatibilityMode is an agent mode (ModeNames), normalised from its
	// aliases. Default "native".
	CompatibilityMode string `toml:"compatibility_mode"`
}

// Resources is [resources]. Zero means "the profile decides".
type Resources struct {
	// VCPUs is a number of cores (1.5 = one and a half).
	VCPUs    float64  `toml:"vcpus"`
	MemoryMB int64    `toml:"memory_mb"` // memory limit in megabytes
	PIDs     int64    `toml:"pids"`      // limit on processes
	DiskMB   int64    `toml:"disk_mb"`   // limit on the writable layer
	Timeout  Duration `toml:"timeout"`   // stop the command after this long
}

// Security is [security]. Pointer and zero-valued switches are unset:
// the profile decides.
type Security struct {
	// Profile is permissive, moderate or restrictive. Default moderate.
	Profile string `toml:"profile"`
	// Network is the network mode: true (egress, in the profile's or
	// mode's way), false ("none"), "none", "filtered" or "full".
	Network NetworkSetting `toml:"network"`
	// MountCwd says how the project directory appears at /workspace.
	MountCwd CwdMount `toml:"mount_cwd"`
	// MountHome mounts $HOME read-only at /home/user.
	MountHome *bool `toml:"mount_home"`
	// PassEnv passes host environment variables.
	PassEnv EnvPass `toml:"pass_env"`
	// ReadOnly makes the root filesystem read-only.
	ReadOnly *bool `toml:"read_only"`
	// Seccomp is default, default-no-ptrace, allowlist or unconfined
	// (upstream names moderate, restrictive and ai-agent are accepted and
	// normalised).
	Seccomp string `toml:"seccomp"`
	// AllowDegraded names the protections a run may go without where
	// this host cannot give them (DegradeCgroups, DegradeLandlock), each
	// with one warning per run; anything not named makes such a run
	// refuse to start. Only trusted configuration sets it (the user's
	// file or --config): a project's agentkernel.toml found in the
	// working directory cannot weaken the sandbox (Load ignores it there
	// with a warning).
	AllowDegraded []string `toml:"allow_degraded"`
	Domains       Domains  `toml:"domains"`  // [security.domains]
	Commands      Commands `toml:"commands"` // [security.commands]
}

// Domains is [security.domains]: egress rules by host name. A pattern
// "*.example.com" matches example.com and its subdomains.
type Domains struct {
	Allow         []string `toml:"allow"`          // hosts that may be reached
	Block         []string `toml:"block"`          // hosts that may not (block wins)
	AllowlistOnly bool     `toml:"allowlist_only"` // only Allow may be reached
}

// Commands is [security.commands]: which argv[0] may run, by basename or
// full path.
type Commands struct {
	Allow         []string `toml:"allow"`          // programs that may run
	Block         []string `toml:"block"`          // programs that may not (block wins)
	AllowlistOnly bool     `toml:"allowlist_only"` // only Allow may run
}

// Network is [network].
type Network struct {
	// Ports to publish: "8080:80", "3000", "127.0.0.1:8080:80", "8443:443/tcp" (TCP only).
	Ports []string `toml:"ports"`
	// AllowCIDRs are address ranges the sandbox may reach by address
	// (including ranges refused by default: private, metadata, host).
	AllowCIDRs []string `toml:"allow_cidrs"`
	// AllowUDP are UDP destinations other than DNS: "HOST:PORT" or
	// "CIDR:PORT".
	AllowUDP []string `toml:"allow_udp"`
	// VsockCID is accepted for upstream compatibility and unused.
	VsockCID int64 `toml:"vsock_cid"`
}

// File is one [[files]] entry: a host file copied into the sandbox.
type File struct {
	// Source is a host path, relative to the directory of the file that
	// declared it (see Config.BaseDir).
	Source string `toml:"source"`
	// Dest is an absolute path in the sandbox.
	Dest string `toml:"dest"`
	// Mode is an octal permission string; default "0644".
	Mode string `toml:"mode"`
}

// Build is [build]: build the image from a Dockerfile.
type Build struct {
	Dockerfile string            `toml:"dockerfile"` // relative to the file's directory
	Context    string            `toml:"context"`    // default: the Dockerfile's directory
	Target     string            `toml:"target"`     // --target
	Args       map[string]string `toml:"args"`       // --build-arg K=V
	NoCache    bool              `toml:"no_cache"`   // rebuild, skipping the cache
}

// Secrets is [secrets].
type Secrets struct {
	// Backend is file (default), env or keyring.
	Backend string `toml:"backend"`
	// Bindings are the other keys of [secrets]: KEY = {host, header}.
	Bindings map[string]SecretBinding `toml:"*"`
}

// SecretBinding injects a secret into requests to Host.
type SecretBinding struct {
	Host   string `toml:"host"`   // the host the secret is sent to
	Header string `toml:"header"` // the request header carrying it
}

// API is [api]: the HTTP API server.
type API struct {
	APIKey        string `toml:"api_key"`         // a key clients must present
	APIKeyEnv     string `toml:"api_key_env"`     // a variable holding the key
	AllowSudoExec bool   `toml:"allow_sudo_exec"` // allow exec as root over the API
	// AllowedHosts are further Host names the server answers to (beyond
	// localhost, loopback and its own addresses); "*" any.
	AllowedHosts []string `toml:"allowed_hosts"`
	// AllowedOrigins are web origins (scheme://host[:port]) whose pages
	// may call the API (CORS); none by default.
	AllowedOrigins []string `toml:"allowed_origins"`
}

// MCP is [mcp]: the MCP server (`agentkernel mcp-server`, /mcp on
// `agentkernel serve`).
type MCP struct {
	// AllowedDirs are host directories, besides the server's project
	// directory, that a tool call may name as its cwd: each allows
	// itself and everything below it. Absolute paths; "/" is refused.
	// Only the server's own configuration counts (its project directory's
	// agentkernel.toml, the user file), never one in the requested cwd.
	AllowedDirs []string `toml:"allowed_dirs"`
}

// Daemon is [daemon]: warm pools.
type Daemon struct {
	MinWarm int64                  `toml:"min_warm"` // sandboxes kept ready
	MaxWarm int64                  `toml:"max_warm"` // at most this many ready
	Agents  map[string]DaemonAgent `toml:"agents"`   // per agent mode
}

// DaemonAgent is [daemon.agents.<mode>].
type DaemonAgent struct {
	MinWarm int64  `toml:"min_warm"` // sandboxes kept ready for this mode
	Runtime string `toml:"runtime"`  // a runtime shorthand (detect.Shorthands)
}

// Orchestrator is [orchestrator]: the Kubernetes and Nomad backends. The
// keys follow upstream's design (plan/orchestration.md).
type Orchestrator struct {
	Provider        string `toml:"provider"`          // kubernetes (or k8s) or nomad
	Namespace       string `toml:"namespace"`         // where sandboxes are created
	WarmPoolSize    int64  `toml:"warm_pool_size"`    // sandboxes kept ready
	Kubeconfig      string `toml:"kubeconfig"`        // Kubernetes: kubeconfig path
	Context         string `toml:"context"`           // Kubernetes: kubeconfig context
	RuntimeClass    string `toml:"runtime_class"`     // Kubernetes: e.g. gvisor, kata
	ServiceAccount  string `toml:"service_account"`   // Kubernetes: pods' service account
	NoUserNamespace bool   `toml:"no_user_namespace"` // Kubernetes: do not ask for hostUsers: false
	Controller      string `toml:"controller"`        // Kubernetes: serve reconciles the CRDs: auto (in a cluster), on, off
	// EgressImage is the image of a Kubernetes sandbox's egress proxy
	// (one holding agentkernel-full, such as serve's own), which domain
	// allow- and block-lists need; EgressDNS the DNS servers the proxy
	// asks ("ADDR" or "ADDR:PORT"; none: the pod's, the cluster's DNS).
	EgressImage     string   `toml:"egress_image"`
	EgressDNS       []string `toml:"egress_dns"`
	NomadAddr       string   `toml:"nomad_addr"`       // Nomad: API address
	NomadToken      string   `toml:"nomad_token"`      // Nomad: ACL token (masked in 'config show')
	NomadDriver     string   `toml:"nomad_driver"`     // Nomad: docker, exec or raw_exec
	NomadDatacenter string   `toml:"nomad_datacenter"` // Nomad: datacenter
	// NomadAgentkernelPath is agentkernel-full's path on the Nomad
	// nodes, NomadNodeDataDir its --data-dir there ("" its default).
	NomadAgentkernelPath string   `toml:"nomad_agentkernel_path"`
	NomadNodeDataDir     string   `toml:"nomad_node_data_dir"`
	MaxSandboxes         int64    `toml:"max_sandboxes"`    // cap on concurrent sandboxes
	WarmPoolImages       []string `toml:"warm_pool_images"` // images the pool keeps ready
}

// Defaults returns the configuration used when no file sets a value.
func Defaults() *Config {
	c := &Config{
		Agent:    Agent{Preferred: "claude", CompatibilityMode: ModeNative},
		Security: Security{Profile: ProfileModerate},
		Secrets:  Secrets{Backend: "file"},
	}
	// Keys no file sets have no entry: Source reports SourceDefault for
	// them. (Listing every key here meant rendering every value on each
	// run.)
	c.Sources = make(map[string]Source)
	return c
}

// Duration is a time span written as a duration string ("30s", "5m") or
// an integer number of seconds.
type Duration time.Duration

// UnmarshalTOML implements toml.Unmarshaler.
func (d *Duration) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("must not be negative, got %d", x)
		}
		if x > int64(maxDuration/time.Second) {
			return fmt.Errorf("%d seconds is too long", x)
		}
		*d = Duration(time.Duration(x) * time.Second)
		return nil
	case string:
		p, err := ParseDuration(x)
		if err != nil {
			return err
		}
		*d = Duration(p)
		return nil
	}
	return fmt.Errorf("expected a duration like \"30s\" or \"5m\" or a number of seconds, got %s", tomlTypeOf(v))
}

const maxDuration = 100 * 365 * 24 * time.Hour

// ParseDuration reads "30s", "5m", "1h30m", "3d" (parseUnits) or a bare
// number of seconds ("90"). Negative values are rejected.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty duration: use e.g. \"30s\", \"5m\" or a number of seconds")
	}
	if isDigits(s) {
		if len(s) > 10 {
			return 0, fmt.Errorf("duration %q is too long", s)
		}
		var n int64
		for _, c := range s {
			n = n*10 + int64(c-'0')
		}
		if n > int64(maxDuration/time.Second) {
			return 0, fmt.Errorf("duration %q is too long", s)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := parseUnits(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: use e.g. \"30s\", \"5m\", \"2h30m\", \"3d\" or a number of seconds", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q must not be negative", s)
	}
	if d > maxDuration {
		return 0, fmt.Errorf("duration %q is too long", s)
	}
	return d, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// NetworkSetting is [security].network. "" leaves it to the profile.
type NetworkSetting string

// NetworkSetting values. A TOML true means NetworkOn, false NetworkOff.
const (
	NetworkUnset NetworkSetting = ""
	// NetworkOn is egress as the profile or mode gives it: filtered when
	// a mode or allowlist_only lists the allowed names, full otherwise.
	NetworkOn       NetworkSetting = "on"
	NetworkOff      NetworkSetting = "none"
	NetworkFiltered NetworkSetting = "filtered"
	NetworkAll      NetworkSetting = "full"
)

// ParseNetworkSetting reads a network mode as --network and the API take
// it: none, filtered, full, or on/true and off/false.
func ParseNetworkSetting(s string) (NetworkSetting, error) {
	switch strings.ToLower(s) {
	case "none", "off", "false":
		return NetworkOff, nil
	case "on", "true":
		return NetworkOn, nil
	case "filtered":
		return NetworkFiltered, nil
	case "full":
		return NetworkAll, nil
	}
	return NetworkUnset, fmt.Errorf("unknown network mode %q: use none, filtered, full or on", s)
}

// UnmarshalTOML implements toml.Unmarshaler.
func (n *NetworkSetting) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case bool:
		*n = NetworkOff
		if x {
			*n = NetworkOn
		}
		return nil
	case string:
		m, err := ParseNetworkSetting(x)
		if err != nil {
			return err
		}
		*n = m
		return nil
	}
	return fmt.Errorf("expected true, false or one of \"none\", \"filtered\", \"full\", got %s", tomlTypeOf(v))
}

// CwdMount is [security].mount_cwd: how the project directory appears at
// /workspace. "" leaves it to the profile.
type CwdMount string

// CwdMount values. A TOML true means CwdReadWrite and false CwdNone
// (upstream's boolean form).
const (
	CwdUnset       CwdMount = ""
	CwdReadWrite   CwdMount = "rw"
	CwdCopyOnWrite CwdMount = "cow"
	CwdReadOnly    CwdMount = "ro"
	CwdNone        CwdMount = "none"
)

// UnmarshalTOML implements toml.Unmarshaler.
func (m *CwdMount) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case bool:
		if x {
			*m = CwdReadWrite
		} else {
			*m = CwdNone
		}
		return nil
	case string:
		switch CwdMount(x) {
		case CwdReadWrite, CwdCopyOnWrite, CwdReadOnly, CwdNone:
			*m = CwdMount(x)
			return nil
		}
		return fmt.Errorf("unknown value %q: use \"rw\", \"cow\", \"ro\", \"none\", true or false", x)
	}
	return fmt.Errorf("expected true, false or one of \"rw\", \"cow\", \"ro\", \"none\", got %s", tomlTypeOf(v))
}

// EnvPass is [security].pass_env: true passes the profile's safe list,
// false passes nothing, and a list of names passes exactly those.
type EnvPass struct {
	// Set is false when no file set pass_env: the profile decides.
	Set bool
	// Enabled is false for pass_env = false.
	Enabled bool
	// Names is the explicit list; nil with Enabled means the safe list.
	Names []string
}

// UnmarshalTOML implements toml.Unmarshaler.
func (e *EnvPass) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case bool:
		*e = EnvPass{Set: true, Enabled: x}
		return nil
	case []any:
		names := make([]string, 0, len(x))
		for _, n := range x {
			s, ok := n.(string)
			if !ok {
				return fmt.Errorf("expected a list of variable names, found %s in it", tomlTypeOf(n))
			}
			if s == "" || strings.ContainsAny(s, "=\x00") {
				return fmt.Errorf("invalid variable name %q", s)
			}
			names = append(names, s)
		}
		*e = EnvPass{Set: true, Enabled: true, Names: names}
		return nil
	}
	return fmt.Errorf("expected true, false or a list of variable names, got %s", tomlTypeOf(v))
}

// SourceKind says which layer a value came from.
type SourceKind string

// The layers, lowest precedence first.
const (
	SourceDefault SourceKind = "default"
	SourceUser    SourceKind = "user"
	SourceProject SourceKind = "project"
)

// Source is where one value was set.
type Source struct {
	// Kind is the layer.
	Kind SourceKind `json:"kind"`
	// Path is the file ("" for defaults).
	Path string `json:"path,omitempty"`
	// Line is 1-based; 0 when unknown.
	Line int `json:"line,omitempty"`
}

// String renders "default", "user /home/u/.config/agentkernel/config.toml:3"
// or "project agentkernel.toml:7".
func (s Source) String() string {
	if s.Kind == SourceDefault || s.Kind == "" {
		return string(SourceDefault)
	}
	if s.Line > 0 {
		return fmt.Sprintf("%s %s:%d", s.Kind, s.Path, s.Line)
	}
	return fmt.Sprintf("%s %s", s.Kind, s.Path)
}

// IsSet reports whether a file (not the defaults) set key.
func (c *Config) IsSet(key string) bool {
	s, ok := c.Sources[key]
	return ok && s.Kind != SourceDefault && s.Kind != ""
}

// Source returns where key's value came from (SourceDefault when unknown).
func (c *Config) Source(key string) Source {
	if s, ok := c.Sources[key]; ok {
		return s
	}
	return Source{Kind: SourceDefault}
}

// BaseDir is the directory relative paths in key's value are resolved
// against: the directory of the file that set it, or dir for defaults.
func (c *Config) BaseDir(key, dir string) string {
	s := c.Source(key)
	if s.Path == "" {
		return dir
	}
	return filepath.Dir(s.Path)
}

package config

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/agentkernel/agentkernel/internal/detect"
)

// Limits on values; beyond them a value is certainly a mistake.
const (
	maxVCPUs    = 1024
	maxMemoryMB = 1 << 30 // 1 PiB
	maxPIDs     = 1 << 22 // the kernel's pid_max ceiling
	maxDiskMB   = 1 << 40
)

// validate checks values and normalises names (profile, mode, seccomp).
// Errors point at the line that set the value.
func (c *Config) validate() error {
	fail := func(key, format string, args ...any) error {
		s := c.Source(key)
		return &Error{Path: s.Path, Line: s.Line, Key: key, Msg: fmt.Sprintf(format, args...)}
	}

	// [cache]
	for i, t := range c.Cache.Tools {
		if err := ValidateCacheTool(t); err != nil {
			return fail("cache.tools", "tools[%d]: %v", i, err)
		}
	}

	// [sandbox]
	if n := c.Sandbox.Name; n != "" {
		if err := ValidateSandboxName(n); err != nil {
			return fail("sandbox.name", "%v", err)
		}
	}
	if r := c.Sandbox.Runtime; r != "" {
		if _, ok := detect.RuntimeImage(r); !ok {
			return fail("sandbox.runtime", "unknown runtime %q: use %s (or set base_image)", r, strings.Join(detect.RuntimeNames(), ", "))
		}
	}
	if img := c.Sandbox.BaseImage; img != "" {
		if err := ValidateImageRef(img); err != nil {
			return fail("sandbox.base_image", "%v", err)
		}
	}

	if b := c.Sandbox.Backend; b != "" {
		c.Sandbox.Backend = strings.ToLower(b)
		if !slices.Contains(BackendNames(), c.Sandbox.Backend) {
			return fail("sandbox.backend", "unknown backend %q: use %s", b, strings.Join(BackendNames(), ", "))
		}
	}

	// [agent]
	if p := strings.ToLower(c.Agent.Preferred); p != "" {
		if !slices.Contains(AgentNames(), p) {
			return fail("agent.preferred", "unknown agent %q: use %s", c.Agent.Preferred, strings.Join(AgentNames(), ", "))
		}
		c.Agent.Preferred = p
	}
	if c.Agent.CompatibilityMode == "" {
		c.Agent.CompatibilityMode = ModeNative
	}
	m, err := ParseMode(c.Agent.CompatibilityMode)
	if err != nil {
		return fail("agent.compatibility_mode", "%v", err)
	}
	c.Agent.CompatibilityMode = m

	// [resources]
	r := c.Resources
	if c.IsSet("resources.vcpus") && (math.IsNaN(r.VCPUs) || r.VCPUs <= 0 || r.VCPUs > maxVCPUs) {
		return fail("resources.vcpus", "must be a number of cores above 0 and at most %d, got %v", maxVCPUs, r.VCPUs)
	}
	if c.IsSet("resources.memory_mb") && (r.MemoryMB <= 0 || r.MemoryMB > maxMemoryMB) {
		return fail("resources.memory_mb", "must be a positive number of megabytes, got %d (leave it out for the profile's limit)", r.MemoryMB)
	}
	if c.IsSet("resources.pids") && (r.PIDs <= 0 || r.PIDs > maxPIDs) {
		return fail("resources.pids", "must be a positive number of processes up to %d, got %d", maxPIDs, r.PIDs)
	}
	if c.IsSet("resources.disk_mb") && (r.DiskMB <= 0 || r.DiskMB > maxDiskMB) {
		return fail("resources.disk_mb", "must be a positive number of megabytes, got %d", r.DiskMB)
	}

	// [security]
	if c.Security.Profile == "" {
		c.Security.Profile = ProfileModerate
	}
	p, err := ParseProfile(c.Security.Profile)
	if err != nil {
		return fail("security.profile", "%v", err)
	}
	c.Security.Profile = p
	if s := c.Security.Seccomp; s != "" {
		n, err := ParseSeccomp(s)
		if err != nil {
			return fail("security.seccomp", "%v", err)
		}
		c.Security.Seccomp = n
	}
	for i, d := range c.Security.AllowDegraded {
		n := strings.ToLower(strings.TrimSpace(d))
		if !slices.Contains(DegradeNames(), n) {
			return fail("security.allow_degraded", "unknown protection %q: allow_degraded takes %s", d, strings.Join(DegradeNames(), ", "))
		}
		c.Security.AllowDegraded[i] = n
	}
	for _, list := range []struct {
		key string
		v   []string
	}{{"security.domains.allow", c.Security.Domains.Allow}, {"security.domains.block", c.Security.Domains.Block}} {
		for _, d := range list.v {
			if err := ValidateDomainPattern(d); err != nil {
				return fail(list.key, "%v", err)
			}
		}
	}
	for _, list := range []struct {
		key string
		v   []string
	}{{"security.commands.allow", c.Security.Commands.Allow}, {"security.commands.block", c.Security.Commands.Block}} {
		for _, cmd := range list.v {
			if strings.TrimSpace(cmd) == "" || strings.ContainsRune(cmd, 0) {
				return fail(list.key, "invalid command %q: use a program name or an absolute path", cmd)
			}
		}
	}

	// [network]
	for _, port := range c.Network.Ports {
		if err := ValidatePort(port); err != nil {
			return fail("network.ports", "%v", err)
		}
	}
	for _, c := range c.Network.AllowCIDRs {
		if _, err := ParseCIDR(c); err != nil {
			return fail("network.allow_cidrs", "%v", err)
		}
	}
	for _, u := range c.Network.AllowUDP {
		if err := ValidateUDPRule(u); err != nil {
			return fail("network.allow_udp", "%v", err)
		}
	}

	// [[files]]
	for i, f := range c.Files {
		key := fmt.Sprintf("files[%d]", i)
		switch {
		case f.Source == "":
			return fail(key, "source is required")
		case f.Dest == "":
			return fail(key, "dest is required")
		case !strings.HasPrefix(f.Dest, "/"):
			return fail(key, "dest %q must be an absolute path in the sandbox", f.Dest)
		case hasDotDot(f.Dest):
			return fail(key, "dest %q must not contain \"..\"", f.Dest)
		case strings.ContainsRune(f.Source+f.Dest, 0):
			return fail(key, "paths must not contain NUL bytes")
		}
		if f.Mode != "" {
			if m, err := strconv.ParseUint(f.Mode, 8, 32); err != nil || m > 0o7777 {
				return fail(key, "mode %q must be an octal permission such as \"0644\"", f.Mode)
			}
		}
	}

	// [build]
	for k := range c.Build.Args {
		if k == "" {
			return fail("build.args", "build argument names must not be empty")
		}
	}

	// [secrets]
	switch c.Secrets.Backend {
	case "", "file", "env", "keyring":
	default:
		return fail("secrets.backend", "unknown backend %q: use file, env or keyring", c.Secrets.Backend)
	}
	for name, b := range c.Secrets.Bindings {
		if b.Host == "" {
			return fail("secrets."+name, "host is required")
		}
	}

	// [api]
	if e := c.API.APIKeyEnv; e != "" && !validEnvName(e) {
		return fail("api.api_key_env", "%q is not an environment variable name", e)
	}
	for i, h := range c.API.AllowedHosts {
		n, err := NormalizeAllowedHost(h)
		if err != nil {
			return fail("api.allowed_hosts", "%v", err)
		}
		c.API.AllowedHosts[i] = n
	}
	for i, o := range c.API.AllowedOrigins {
		n, err := NormalizeOrigin(o)
		if err != nil {
			return fail("api.allowed_origins", "%v", err)
		}
		c.API.AllowedOrigins[i] = n
	}

	// [mcp]
	for i, d := range c.MCP.AllowedDirs {
		if err := validateAllowedDir(d); err != nil {
			return fail("mcp.allowed_dirs", "%v", err)
		}
		c.MCP.AllowedDirs[i] = filepath.Clean(d)
	}

	// [daemon]
	if c.Daemon.MinWarm < 0 {
		return fail("daemon.min_warm", "must not be negative")
	}
	if c.Daemon.MaxWarm < 0 {
		return fail("daemon.max_warm", "must not be negative")
	}
	if c.IsSet("daemon.max_warm") && c.Daemon.MinWarm > c.Daemon.MaxWarm {
		return fail("daemon.min_warm", "min_warm (%d) is larger than max_warm (%d)", c.Daemon.MinWarm, c.Daemon.MaxWarm)
	}
	for mode, a := range c.Daemon.Agents {
		key := "daemon.agents." + mode
		if _, err := ParseMode(mode); err != nil {
			return fail(key, "%v", err)
		}
		if a.MinWarm < 0 {
			return fail(key+".min_warm", "must not be negative")
		}
		if a.Runtime != "" {
			if _, ok := detect.RuntimeImage(a.Runtime); !ok {
				return fail(key+".runtime", "unknown runtime %q: use %s", a.Runtime, strings.Join(detect.RuntimeNames(), ", "))
			}
		}
	}

	// [orchestrator]
	o := c.Orchestrator
	switch o.Provider {
	case "", "kubernetes", "nomad":
	case "k8s":
		c.Orchestrator.Provider = "kubernetes"
	default:
		return fail("orchestrator.provider", "unknown provider %q: use kubernetes or nomad", o.Provider)
	}
	switch o.NomadDriver {
	case "", "docker", "exec", "raw_exec":
	default:
		return fail("orchestrator.nomad_driver", "unknown driver %q: use docker, exec or raw_exec", o.NomadDriver)
	}
	switch o.Controller {
	case "", "auto", "on", "off":
	default:
		return fail("orchestrator.controller", "unknown value %q: use auto, on or off", o.Controller)
	}
	if o.WarmPoolSize < 0 {
		return fail("orchestrator.warm_pool_size", "must not be negative")
	}
	if o.MaxSandboxes < 0 {
		return fail("orchestrator.max_sandboxes", "must not be negative")
	}
	if o.EgressImage != "" {
		if err := ValidateImageRef(o.EgressImage); err != nil {
			return fail("orchestrator.egress_image", "%v", err)
		}
	}
	if len(o.EgressDNS) > 16 {
		return fail("orchestrator.egress_dns", "at most 16 servers")
	}
	for _, d := range o.EgressDNS {
		if ap, err := netip.ParseAddrPort(d); err != nil || ap.Addr().Zone() != "" || ap.Port() == 0 {
			if a, err := netip.ParseAddr(d); err != nil || a.Zone() != "" {
				return fail("orchestrator.egress_dns", "%q is not ADDR or ADDR:PORT (10.96.0.10, [fd00::a]:53)", d)
			}
		}
	}
	return nil
}

// validateAllowedDir accepts an absolute host directory path other than
// the root for [mcp] allowed_dirs.
func validateAllowedDir(d string) error {
	switch {
	case strings.ContainsRune(d, 0):
		return fmt.Errorf("%q contains a NUL byte", d)
	case !filepath.IsAbs(d):
		return fmt.Errorf("%q is not an absolute path: write the directory in full, such as \"/home/me/other-project\"", d)
	case hasDotDot(filepath.ToSlash(d)):
		return fmt.Errorf("%q must not contain \"..\"", d)
	case filepath.Clean(d) == "/":
		return fmt.Errorf("\"/\" cannot be allowed: it would give a tool call every host directory")
	}
	return nil
}

// ParseSeccomp normalises a seccomp profile name. Upstream's file names
// are accepted: moderate means default-no-ptrace; restrictive and ai-agent
// mean allowlist.
func ParseSeccomp(s string) (string, error) {
	switch n := strings.ToLower(strings.TrimSpace(s)); n {
	case "default", "docker-default":
		return "default", nil
	case "default-no-ptrace", "moderate":
		return "default-no-ptrace", nil
	case "allowlist", "restrictive", "ai-agent":
		return "allowlist", nil
	case "unconfined":
		return "unconfined", nil
	}
	return "", fmt.Errorf("unknown seccomp profile %q: use default, default-no-ptrace, allowlist or unconfined (profile files are not supported)", s)
}

// ValidateImageRef applies upstream's image name check: at most 256
// characters of ASCII letters, digits and . - _ / : @.
func ValidateImageRef(ref string) error {
	if ref == "" {
		return fmt.Errorf("image name is empty")
	}
	if len(ref) > 256 {
		return fmt.Errorf("image name is too long (max 256 characters)")
	}
	for i := 0; i < len(ref); i++ {
		c := ref[i]
		if !isAlnum(c) && !strings.ContainsRune(".-_/:@", rune(c)) {
			return fmt.Errorf("image name %q contains invalid character %q", ref, c)
		}
	}
	return nil
}

// ValidateDomainPattern accepts a host name, an IP address, or
// "*.example.com".
func ValidateDomainPattern(d string) error {
	host := strings.TrimPrefix(d, "*.")
	if host == "" || len(host) > 253 {
		return fmt.Errorf("invalid domain pattern %q", d)
	}
	if strings.HasSuffix(host, ".") {
		return fmt.Errorf("invalid domain pattern %q: write it without the trailing dot", d)
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !isAlnum(c) && c != '-' && c != '.' && c != ':' && c != '_' {
			return fmt.Errorf("invalid domain pattern %q: use a host name, an IP address or *.example.com", d)
		}
	}
	return nil
}

// ParseCIDR reads an address range as --allow-cidr and
// [network].allow_cidrs take it: "10.0.0.0/8", "fd00::/8", or one
// address ("10.0.0.5" is 10.0.0.5/32). The range is returned masked.
func ParseCIDR(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Zone() == "" {
		return p.Masked(), nil
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	return netip.Prefix{}, fmt.Errorf("invalid address range %q: use an address or a CIDR such as 10.0.0.0/8 or fd00::/8", s)
}

// ValidateUDPRule accepts "HOST:PORT" or "CIDR:PORT" (IPv6 in brackets:
// "[fd00::1]:53"), the UDP destinations a sandbox may send to.
func ValidateUDPRule(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("invalid UDP destination %q: use HOST:PORT or CIDR:PORT", s)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("invalid UDP destination %q: %q is not a port number from 1 to 65535", s, port)
	}
	if _, err := ParseCIDR(host); err == nil {
		return nil
	}
	if err := ValidateDomainPattern(host); err != nil {
		return fmt.Errorf("invalid UDP destination %q: %v", s, err)
	}
	return nil
}

// ValidatePort accepts what ParsePortMapping reads.
func ValidatePort(p string) error {
	_, err := ParsePortMapping(p)
	return err
}

func hasDotDot(p string) bool {
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return true
		}
	}
	return false
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || isAlnum(c)) || (i == 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

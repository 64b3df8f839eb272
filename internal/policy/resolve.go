package policy

import (
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/detect"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// DefaultHostname is the sandbox's hostname unless --hostname is given.
const DefaultHostname = "agentkernel"

// Overrides are the run flags that describe a sandbox (see the CLI's
// bindSpecFlags). A field counts only when Set names its flag; with a nil
// Set, non-zero fields count (convenient for API callers).
type Overrides struct {
	// Name is the sandbox name of a persistent sandbox ("" for run).
	Name string

	Profile  string // --profile/-p
	Mode     string // --mode
	Image    string // --image/-i
	Pull     string // --pull: missing, always or never
	Memory   string // --memory: a size such as "512m" or "2g" (see ParseMemory)
	User     string // --user/-u
	Workdir  string // --workdir/-w
	Hostname string // --hostname

	CPUs    float64       // --cpus, in cores
	PIDs    int64         // --pids
	Timeout time.Duration // --timeout; 0 with Set["timeout"] means none

	NoNetwork bool // --no-network: beats everything else
	// Network is --network: none, filtered, full, or on (egress as the
	// profile, mode and config give it: filtered where they list the
	// allowed names, full otherwise); config.ParseNetworkSetting reads it.
	Network     config.NetworkSetting
	ReadOnly    bool // --read-only
	TTY         bool // --tty/-t
	Interactive bool // --interactive
	Keep        bool // --keep/-k
	HostUserNS  bool // --userns=host

	Env      []string // -e/--env: KEY=VALUE or KEY (from the host)
	EnvFiles []string // --env-file, relative to Input.Cwd
	Volumes  []string // -v/--volume: HOST:SANDBOX[:ro|:cow]
	// Caches are --cache: go, pip, npm, cargo (added to [cache] tools),
	// or "none" (no cache, not even the configured ones).
	Caches []string

	AllowDomains []string // --allow-domain: names the sandbox may reach
	BlockDomains []string // --block-domain: names it may not (block wins)
	AllowCIDRs   []string // --allow-cidr: ranges it may reach by address
	Publish      []string // -P/--publish: HOST:SANDBOX[/tcp]

	// Set holds the long names of the flags that were given: "profile",
	// "mode", "image", "pull", "memory", "user", "workdir", "hostname",
	// "cpus", "pids", "timeout", "no-network", "network", "read-only",
	// "tty", "interactive", "keep", "userns", "name". Env, EnvFiles,
	// Volumes, AllowDomains, BlockDomains, AllowCIDRs and Publish always
	// count.
	Set map[string]bool
}

// given reports whether flag counts: named in Set, or (with no Set) nonZero.
func (o *Overrides) given(flag string, nonZero bool) bool {
	if o.Set != nil {
		return o.Set[flag]
	}
	return nonZero
}

// Input is everything Resolve looks at.
type Input struct {
	// Config is the loaded configuration (config.Load, config.Parse or
	// config.Defaults); nil means the defaults.
	Config *config.Config
	// Overrides are the flags.
	Overrides Overrides
	// Args is the command ("" Args: the image's entrypoint).
	Args []string
	// Cwd is the project directory (mounted at /workspace by profiles
	// that mount it) and the base of relative -v and --env-file paths.
	Cwd string
	// HomeDir is the host $HOME (mounted read-only by permissive).
	HomeDir string
	// HostEnv looks up host environment variables; nil means
	// os.LookupEnv.
	HostEnv func(string) (string, bool)
	// Detected is the image detection already done by the caller; when
	// its Image is empty, Resolve runs detect.Image itself.
	Detected detect.Result
	// DataDir is agentkernel's data directory (its state, snapshots,
	// secrets and keys): a project directory, $HOME mount or volume that
	// holds it would hand it to the sandbox, so the project directory and
	// $HOME are then left unmounted (with a warning) and such a volume is
	// refused. "": the caller has none to protect.
	DataDir string
	// CacheRoot is where the caches of --cache and [cache] live (a
	// directory of the data directory); empty: the caller has none, and
	// configured caches are left out with a warning.
	CacheRoot string
	// SayWhereItRuns adds a warning when the profile or [security]
	// mount_cwd leaves the project directory out and nothing else (no
	// --workdir, no volume of the directory) says where the command
	// runs: a command-line run, whose user expects it to run in the
	// project (a test runner would find nothing, and say so quietly).
	SayWhereItRuns bool
}

// Resolve builds the Spec for one sandbox. Warnings are things the user
// should know but that do not stop the run; errors are bad input (an
// unknown profile or mode, a bad flag value). A command that
// [security.commands] does not allow is not an error here: the rules go
// into Spec.Commands and sandbox.Manager refuses the command when it
// would start, on every path (run, exec, attach, warm pools).
func Resolve(in Input) (*sandbox.Spec, []string, error) {
	cfg := in.Config
	if cfg == nil {
		cfg = config.Defaults()
	}
	o := &in.Overrides
	lookup := in.HostEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var warns []string
	warnf := func(format string, args ...any) { warns = append(warns, fmt.Sprintf(format, args...)) }

	// Mode, then profile (whose default depends on the mode).
	modeName := cfg.Agent.CompatibilityMode
	if modeName == "" {
		modeName = config.ModeNative
	}
	if o.given("mode", o.Mode != "") {
		modeName = o.Mode
	}
	mode, err := LookupMode(modeName)
	if err != nil {
		return nil, warns, err
	}
	profName := mode.BaseProfile
	if cfg.IsSet("security.profile") {
		profName = cfg.Security.Profile
	}
	if o.given("profile", o.Profile != "") {
		profName = o.Profile
	}
	prof, err := LookupProfile(profName)
	if err != nil {
		return nil, warns, err
	}

	spec := &sandbox.Spec{
		ID:       NewID(),
		Args:     slices.Clone(in.Args),
		Hostname: DefaultHostname,
		Profile:  prof.Name,
		Mode:     mode.Name,
	}
	if o.given("name", o.Name != "") {
		if err := config.ValidateSandboxName(o.Name); err != nil {
			return nil, warns, err
		}
		spec.Name = o.Name
	}
	// [security.commands] travels with the spec: the Manager checks it
	// wherever a command starts (run, exec, attach, warm pools).
	spec.Commands = CommandRules(cfg)

	if err := resolveImage(spec, cfg, o, in); err != nil {
		return nil, warns, err
	}
	if err := resolveNetwork(spec, cfg, o, prof, mode, warnf); err != nil {
		return nil, warns, err
	}
	if err := resolveMounts(spec, cfg, o, prof, mode, in, warnf); err != nil {
		return nil, warns, err
	}
	if err := resolveEnv(spec, cfg, o, prof, mode, in, lookup, warnf); err != nil {
		return nil, warns, err
	}
	if err := resolveCaches(spec, cfg, o, in, warnf); err != nil {
		return nil, warns, err
	}
	if err := resolveResources(spec, cfg, o, prof); err != nil {
		return nil, warns, err
	}
	if err := resolveSecurity(spec, cfg, o, prof, warnf); err != nil {
		return nil, warns, err
	}
	if err := resolveProcess(spec, o); err != nil {
		return nil, warns, err
	}
	if in.SayWhereItRuns {
		if note := unmountedProjectNote(spec, cfg, projectMount(cfg, prof, mode), in.Cwd); note != "" {
			warnf("%s", note)
		}
	}
	return spec, warns, nil
}

// projectMount is how the project directory is mounted: the profile's
// way, read-write in agent modes, and [security] mount_cwd over both.
func projectMount(cfg *config.Config, prof Profile, mode Mode) config.CwdMount {
	m := prof.Cwd
	if mode.Agent {
		m = config.CwdReadWrite
	}
	if cfg.Security.MountCwd != config.CwdUnset {
		m = cfg.Security.MountCwd
	}
	return m
}

// unmountedProjectNote says where the command runs when cwdMode leaves
// the project directory cwd out of the sandbox and neither --workdir nor
// a volume of cwd places the command; "" otherwise.
func unmountedProjectNote(spec *sandbox.Spec, cfg *config.Config, cwdMode config.CwdMount, cwd string) string {
	if cwdMode != config.CwdNone || spec.Workdir != "" {
		return ""
	}
	dir, err := absDir(cwd)
	if err != nil || dir == "/" {
		return ""
	}
	for _, m := range spec.Mounts {
		if m.Kind != sandbox.MountTmpfs && (m.Source == dir || m.Dest == WorkspaceDir) {
			return ""
		}
	}
	why := "the " + spec.Profile + " profile does not mount the project directory"
	if cfg.Security.MountCwd == config.CwdNone {
		why = "[security] mount_cwd in the configuration leaves the project directory out"
	}
	return fmt.Sprintf("%s: the command runs in the image's working directory (/ unless the image sets one), not in %s; -v .:%s:ro -w %s lets it read the project",
		why, dir, WorkspaceDir, WorkspaceDir)
}

func resolveImage(spec *sandbox.Spec, cfg *config.Config, o *Overrides, in Input) error {
	spec.Pull = "missing"
	if o.given("pull", o.Pull != "") {
		switch o.Pull {
		case "missing", "always", "never":
			spec.Pull = o.Pull
		default:
			return fmt.Errorf("invalid --pull %q: use missing, always or never", o.Pull)
		}
	}
	det := in.Detected
	if o.given("image", o.Image != "") {
		det = detect.Result{Image: o.Image, Rule: detect.RuleFlag}
	}
	if det.Image == "" {
		det = detect.Image(detect.Input{
			ConfigImage:   cfg.Sandbox.BaseImage,
			ConfigRuntime: cfg.Sandbox.Runtime,
			Args:          in.Args,
			Dir:           in.Cwd,
		})
	}
	if err := config.ValidateImageRef(det.Image); err != nil {
		return err
	}
	spec.Image, spec.ImageRule = det.Image, det.Rule
	return nil
}

func resolveNetwork(spec *sandbox.Spec, cfg *config.Config, o *Overrides, prof Profile, mode Mode, warnf func(string, ...any)) error {
	d := cfg.Security.Domains
	// Egress as the profile, mode and config give it: an agent mode
	// filters by its lists, allowlist_only filters by [security.domains].
	egress := sandbox.NetworkFull
	if mode.Agent || d.AllowlistOnly {
		egress = sandbox.NetworkFiltered
	}
	netMode := prof.Network
	if mode.Agent {
		netMode = sandbox.NetworkFiltered
	}
	apply := func(set config.NetworkSetting) {
		switch set {
		case config.NetworkOff:
			netMode = sandbox.NetworkNone
		case config.NetworkOn:
			if !netMode.Egress() {
				netMode = egress
			}
		case config.NetworkFiltered:
			netMode = sandbox.NetworkFiltered
		case config.NetworkAll:
			netMode = sandbox.NetworkFull
		}
	}
	apply(cfg.Security.Network)
	if netMode == sandbox.NetworkFull && d.AllowlistOnly {
		netMode = sandbox.NetworkFiltered
	}
	wantOff := o.given("no-network", o.NoNetwork) && o.NoNetwork
	if o.given("network", o.Network != "") && o.Network != "" {
		if wantOff && o.Network != config.NetworkOff {
			return fmt.Errorf("--network %s and --no-network cannot be used together", o.Network)
		}
		apply(o.Network)
	}
	if wantOff {
		netMode = sandbox.NetworkNone
	}
	spec.Network = sandbox.Network{Mode: netMode}

	for _, p := range o.AllowDomains {
		if err := config.ValidateDomainPattern(p); err != nil {
			return fmt.Errorf("--allow-domain: %w", err)
		}
	}
	for _, p := range o.BlockDomains {
		if err := config.ValidateDomainPattern(p); err != nil {
			return fmt.Errorf("--block-domain: %w", err)
		}
	}
	var cidrs []string
	for _, c := range append(slices.Clone(cfg.Network.AllowCIDRs), o.AllowCIDRs...) {
		p, err := config.ParseCIDR(c)
		if err != nil {
			return fmt.Errorf("--allow-cidr: %w", err)
		}
		cidrs = append(cidrs, p.String())
	}
	var ports []sandbox.PortMapping
	for _, p := range append(slices.Clone(cfg.Network.Ports), o.Publish...) {
		m, err := config.ParsePortMapping(p)
		if err != nil {
			return fmt.Errorf("--publish: %w", err)
		}
		for _, q := range ports {
			if q.HostPort == m.HostPort && q.HostIP == m.HostIP && q.Proto == m.Proto {
				return fmt.Errorf("--publish: host port %s is published twice", m)
			}
		}
		ports = append(ports, m)
	}

	if netMode == sandbox.NetworkNone {
		if len(d.Allow) > 0 || len(d.Block) > 0 || d.AllowlistOnly {
			warnf("the domain rules in [security.domains] have no effect because network access is off")
		}
		if len(o.AllowDomains)+len(o.BlockDomains)+len(o.AllowCIDRs) > 0 {
			warnf("--allow-domain, --block-domain and --allow-cidr have no effect because network access is off (add --network filtered or --network full)")
		}
		if mode.Agent {
			warnf("mode %s needs network access to reach %s, but network access is off", mode.Name, mode.AllowDomains[0])
		}
		if len(ports) > 0 {
			return fmt.Errorf("published ports need network access, which is off (add --network full or --network filtered)")
		}
		return nil
	}
	spec.Network.AllowDomains = dedupe(append(append(slices.Clone(mode.AllowDomains), d.Allow...), o.AllowDomains...))
	// The metadata endpoints (MetadataHosts) are not listed: the network
	// refuses them in every mode whatever the lists say.
	spec.Network.BlockDomains = dedupe(append(append(slices.Clone(mode.BlockDomains), d.Block...), o.BlockDomains...))
	spec.Network.AllowCIDRs = dedupe(cidrs)
	spec.Network.AllowUDP = dedupe(slices.Clone(cfg.Network.AllowUDP))
	spec.Network.AllowlistOnly = d.AllowlistOnly
	spec.Network.Ports = ports
	for _, a := range spec.Network.AllowDomains {
		for _, m := range sandbox.MetadataNames() {
			if DomainMatches(m, a) {
				warnf("domain %q in the allow list is a cloud metadata endpoint, which is refused in every mode", a)
			}
		}
		for _, b := range spec.Network.BlockDomains {
			if DomainMatches(b, strings.TrimPrefix(a, "*.")) {
				warnf("domain %q is in the allow list but matched by the block list %q (block takes precedence)", a, b)
				break
			}
		}
	}
	return nil
}

// DomainMatches reports whether host matches pattern: "*.example.com"
// matches example.com and any name under it; other patterns match
// exactly (case-insensitive).
func DomainMatches(pattern, host string) bool {
	pattern, host = strings.ToLower(pattern), strings.ToLower(strings.TrimSuffix(host, "."))
	if apex, ok := strings.CutPrefix(pattern, "*."); ok {
		return host == apex || strings.HasSuffix(host, "."+apex)
	}
	return host == pattern
}

func resolveMounts(spec *sandbox.Spec, cfg *config.Config, o *Overrides, prof Profile, mode Mode, in Input, warnf func(string, ...any)) error {
	var mounts []sandbox.Mount

	cwdMode := projectMount(cfg, prof, mode)
	if cwdMode != config.CwdNone {
		cwd, err := absDir(in.Cwd)
		switch {
		case err != nil:
			warnf("the project directory is not mounted: %v", err)
		case cwd == "/":
			warnf("the project directory is not mounted: refusing to mount / at %s", WorkspaceDir)
		case holdsDataDir(cwd, in.DataDir):
			warnf("the project directory is not mounted: %s holds agentkernel's data directory %s (its state, snapshots and keys); run from a project directory, or give --data-dir outside it", cwd, in.DataDir)
		default:
			m := sandbox.Mount{Kind: sandbox.MountBind, Source: cwd, Dest: WorkspaceDir}
			switch cwdMode {
			case config.CwdCopyOnWrite:
				m.Kind = sandbox.MountCopyOnWrite
			case config.CwdReadOnly:
				m.ReadOnly = true
			}
			mounts = append(mounts, m)
			spec.Workdir = WorkspaceDir
		}
	}

	home := prof.MountHome
	if cfg.Security.MountHome != nil {
		home = *cfg.Security.MountHome
	}
	if home {
		h, err := absDir(in.HomeDir)
		switch {
		case err != nil:
			warnf("$HOME is not mounted: %v", err)
		case holdsDataDir(h, in.DataDir):
			warnf("$HOME is not mounted: it holds agentkernel's data directory %s (its state, snapshots and keys); give --data-dir outside it to mount $HOME", in.DataDir)
		default:
			mounts = append(mounts, sandbox.Mount{Kind: sandbox.MountBind, Source: h, Dest: HomeDir, ReadOnly: true})
		}
	}

	for _, v := range o.Volumes {
		m, err := ParseVolume(v, in.Cwd, in.HomeDir)
		if err != nil {
			return err
		}
		if m.Source != "" && holdsDataDir(m.Source, in.DataDir) {
			return fmt.Errorf("volume %s: %s holds agentkernel's data directory %s (its state, snapshots and keys), which no sandbox may see: mount a directory beside it, or give --data-dir outside it", v, m.Source, in.DataDir)
		}
		mounts = append(mounts, m)
	}

	spec.ReadOnlyRoot = prof.ReadOnlyRoot
	if cfg.Security.ReadOnly != nil {
		spec.ReadOnlyRoot = *cfg.Security.ReadOnly
	}
	if o.given("read-only", o.ReadOnly) {
		spec.ReadOnlyRoot = o.ReadOnly
	}
	if spec.ReadOnlyRoot {
		mounts = append([]sandbox.Mount{{Kind: sandbox.MountTmpfs, Dest: "/tmp"}}, mounts...)
	}

	// A later mount on the same path replaces an earlier one (-v over the
	// project mount), and parents are mounted before their children.
	var out []sandbox.Mount
	for i, m := range mounts {
		later := false
		for _, n := range mounts[i+1:] {
			if n.Dest == m.Dest {
				later = true
				break
			}
		}
		if !later {
			out = append(out, m)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return depth(out[i].Dest) < depth(out[j].Dest) })
	spec.Mounts = out
	return nil
}

func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(path.Clean(p), "/")
}

// absDir makes dir absolute and checks that it is a directory.
func absDir(dir string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("directory unknown")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s is not a directory", abs)
	}
	// Symlinks resolved now: the backend mounts the path with none, so
	// that nobody can swap one in between (native: openVolumeSource).
	return filepath.EvalSymlinks(abs)
}

func resolveEnv(spec *sandbox.Spec, cfg *config.Config, o *Overrides, prof Profile, mode Mode, in Input, lookup func(string) (string, bool), warnf func(string, ...any)) error {
	var env []string
	names := prof.PassEnv
	if p := cfg.Security.PassEnv; p.Set {
		switch {
		case !p.Enabled:
			names = nil
		case p.Names != nil:
			names = p.Names
		default:
			names = SafeEnv()
		}
	}
	homeMounted := slices.ContainsFunc(spec.Mounts, func(m sandbox.Mount) bool { return m.Dest == HomeDir })
	for _, n := range names {
		if n == "HOME" {
			// The host's $HOME path means nothing inside; point HOME at
			// the mounted copy, or leave the image's HOME alone.
			if homeMounted {
				env = append(env, "HOME="+HomeDir)
			}
			continue
		}
		if v, ok := lookup(n); ok && !strings.ContainsRune(v, 0) {
			env = append(env, n+"="+v)
		}
	}
	if mode.APIKeyEnv != "" {
		if v, ok := lookup(mode.APIKeyEnv); ok && v != "" {
			env = append(env, mode.APIKeyEnv+"="+v)
		}
	}
	for _, f := range o.EnvFiles {
		p := f
		if !filepath.IsAbs(p) && in.Cwd != "" {
			p = filepath.Join(in.Cwd, p)
		}
		fh, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("--env-file: %w", err)
		}
		kvs, err := ParseEnvFile(fh, f, lookup)
		fh.Close()
		if err != nil {
			return err
		}
		env = append(env, kvs...)
	}
	for _, e := range o.Env {
		kv, ok, err := ParseEnv(e, lookup)
		if err != nil {
			return err
		}
		if !ok {
			warnf("-e %s: not set on the host, not passed", e)
			continue
		}
		env = append(env, kv)
	}
	spec.Env = mergeEnv(env)
	return nil
}

// mergeEnv keeps one entry per key: the last value, at the first position.
func mergeEnv(env []string) []string {
	idx := map[string]int{}
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

func resolveResources(spec *sandbox.Spec, cfg *config.Config, o *Overrides, prof Profile) error {
	r := sandbox.Resources{MemoryMB: prof.MemoryMB, PIDs: prof.PIDs, CPUPercent: prof.CPUPercent}
	c := cfg.Resources
	if cfg.IsSet("resources.vcpus") {
		r.CPUPercent = cpuPercent(c.VCPUs)
	}
	if cfg.IsSet("resources.memory_mb") {
		r.MemoryMB = c.MemoryMB
	}
	if cfg.IsSet("resources.pids") {
		r.PIDs = c.PIDs
	}
	if cfg.IsSet("resources.disk_mb") {
		r.DiskMB = c.DiskMB
	}
	if cfg.IsSet("resources.timeout") {
		r.Timeout = time.Duration(c.Timeout)
	}

	if o.given("memory", o.Memory != "") {
		mb, err := ParseMemory(o.Memory)
		if err != nil {
			return fmt.Errorf("--memory: %w", err)
		}
		r.MemoryMB = mb
	}
	if o.given("cpus", o.CPUs != 0) {
		if math.IsNaN(o.CPUs) || o.CPUs <= 0 || o.CPUs > 1024 {
			return fmt.Errorf("--cpus %v: use a number of cores above 0, such as 0.5 or 2", o.CPUs)
		}
		r.CPUPercent = cpuPercent(o.CPUs)
	}
	if o.given("pids", o.PIDs != 0) {
		if o.PIDs <= 0 {
			return fmt.Errorf("--pids %d: use a positive number of processes", o.PIDs)
		}
		r.PIDs = o.PIDs
	}
	if o.given("timeout", o.Timeout != 0) {
		if o.Timeout < 0 {
			return fmt.Errorf("--timeout %v: must not be negative", o.Timeout)
		}
		r.Timeout = o.Timeout
	}
	spec.Resources = r
	return nil
}

// cpuPercent converts cores to percent of one core, at least 1.
func cpuPercent(cores float64) int64 {
	return max(1, int64(math.Round(cores*100)))
}

func resolveSecurity(spec *sandbox.Spec, cfg *config.Config, o *Overrides, prof Profile, warnf func(string, ...any)) error {
	spec.Security = sandbox.Security{
		Capabilities: slices.Clone(prof.Capabilities),
		Seccomp:      prof.Seccomp,
		NoNewPrivs:   true,
		Landlock:     true,
	}
	if spec.Security.Capabilities == nil {
		spec.Security.Capabilities = []string{}
	}
	if s := cfg.Security.Seccomp; s != "" {
		n, err := config.ParseSeccomp(s)
		if err != nil {
			return err
		}
		spec.Security.Seccomp = sandbox.SeccompProfile(n)
		if spec.Security.Seccomp == sandbox.SeccompUnconfined {
			warnf("[security].seccomp = \"unconfined\": the sandbox runs without a seccomp filter")
		}
	}
	if o.given("userns", o.HostUserNS) {
		spec.Security.HostUserNS = o.HostUserNS
	}
	return nil
}

func resolveProcess(spec *sandbox.Spec, o *Overrides) error {
	if o.given("workdir", o.Workdir != "") {
		w := o.Workdir
		if !strings.HasPrefix(w, "/") || strings.ContainsRune(w, 0) {
			return fmt.Errorf("--workdir %q: use an absolute path in the sandbox", w)
		}
		spec.Workdir = path.Clean(w)
	}
	if o.given("user", o.User != "") {
		u := o.User
		if u == "" || strings.ContainsAny(u, "\x00 \t\n") || strings.Count(u, ":") > 1 {
			return fmt.Errorf("--user %q: use NAME, UID or UID:GID", u)
		}
		spec.User = u
	}
	if o.given("hostname", o.Hostname != "") {
		if err := ValidateHostname(o.Hostname); err != nil {
			return fmt.Errorf("--hostname: %w", err)
		}
		spec.Hostname = o.Hostname
	}
	spec.TTY = o.given("tty", o.TTY) && o.TTY
	spec.Interactive = o.given("interactive", o.Interactive) && o.Interactive
	spec.Keep = o.given("keep", o.Keep) && o.Keep
	return nil
}

func dedupe(list []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// holdsDataDir reports whether dir is dataDir or one of its parents,
// comparing the paths made absolute, with their symbolic links resolved
// (where they resolve).
func holdsDataDir(dir, dataDir string) bool {
	if dir == "" || dataDir == "" {
		return false
	}
	real := func(p string) string {
		// A relative path (--data-dir ./d) is the process's, as every
		// other use of it reads it.
		if a, err := filepath.Abs(p); err == nil {
			p = a
		}
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
		return p
	}
	d, data := real(dir), real(dataDir)
	if !filepath.IsAbs(d) || !filepath.IsAbs(data) {
		return false
	}
	rel, err := filepath.Rel(d, data)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

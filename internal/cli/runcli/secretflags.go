package runcli

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// SecretHelp is the part of run's --help about -S/--secret.
const SecretHelp = `Secrets: -S/--secret KEY:HOST (repeatable) gives the command the secret KEY of
the vault ('agentkernel secret set KEY') for HTTPS requests to HOST, without
the value ever entering the sandbox: inside, $KEY holds the placeholder
ak-proxy-managed; the sandbox's network stack terminates TLS to HOST with a
CA made for this run (trusted inside through the image's CA bundle,
/etc/agentkernel/ca.crt and SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
NODE_EXTRA_CA_CERTS, CURL_CA_BUNDLE, GIT_SSL_CAINFO), sets
"Authorization: Bearer <value>" and sends the request on to HOST over TLS
verified against the host's trust store. KEY:HOST:HEADER puts the value in
HEADER instead, as it is (ANTHROPIC_API_KEY:api.anthropic.com:x-api-key);
KEY=VALUE:HOST gives the value on the command line (visible to other
processes of the host: prefer the vault). Other hosts are not intercepted
(their TLS stays end to end), and a request that carries the placeholder to
a host it is not bound to is refused. The sandbox needs network egress, and
in filtered mode HOST must also be allowed (--allow-domain HOST): a binding
never widens the network policy. -S goes with a plain 'agentkernel run'
(not with --name, -d, --branch or --keep: for a sandbox that keeps its
secrets across restarts, see 'agentkernel sandbox create --help'), and never
goes through the daemon.
[secrets] KEY = {host = "HOST"} in your own configuration file (or --config)
binds KEY for every run that can reach HOST; a project's agentkernel.toml
cannot bind secrets (its bindings are ignored, with a warning).

` + SecretFileHelp

// maxSecretFlags bounds the -S flags of one run (the network helper's
// configuration message carries them all).
const maxSecretFlags = 32

// SecretFlag is one -S/--secret binding as given on the command line.
type SecretFlag struct {
	// Key is the secret's name, and the variable that holds the
	// placeholder inside.
	Key string
	// Host is the host name the secret is added for.
	Host string
	// Header is the header it goes in as it is; "": Authorization: Bearer.
	Header string
	// Value is the inline value (KEY=VALUE:HOST); nil: from the vault.
	Value []byte
}

// Inline reports whether the value was given on the command line.
func (f SecretFlag) Inline() bool { return f.Value != nil }

// bindSecretFlags registers -S/--secret into fs.
func bindSecretFlags(fs *pflag.FlagSet, o *RunOptions) {
	fs.StringArrayVarP(&o.secrets, "secret", "S", nil, "add the vault's secret KEY to HTTPS requests to HOST without it entering the sandbox: KEY:HOST, KEY:HOST:HEADER or KEY=VALUE:HOST (repeatable; see Secrets above)")
	bindSecretFileFlags(fs, o)
}

// ParseSecretFlag parses one -S/--secret binding: KEY:HOST (vault, the
// Authorization: Bearer header), KEY:HOST:HEADER (vault, HEADER: value)
// or KEY=VALUE:HOST (inline; the value may hold ':', the host is what
// follows the last one). Its errors quote the binding but never an inline
// value.
func ParseSecretFlag(s string) (SecretFlag, error) {
	bad := func(format string, args ...any) (SecretFlag, error) {
		return SecretFlag{}, fmt.Errorf("-S/--secret %s: %s (the forms are KEY:HOST, KEY:HOST:HEADER and KEY=VALUE:HOST)", redactBinding(s), fmt.Sprintf(format, args...))
	}
	var f SecretFlag
	eq, colon := strings.IndexByte(s, '='), strings.IndexByte(s, ':')
	if eq >= 0 && (colon < 0 || eq < colon) {
		// KEY=VALUE:HOST
		f.Key = s[:eq]
		rest := s[eq+1:]
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			return bad("an inline value needs the host after it")
		}
		f.Value, f.Host = []byte(rest[:i]), rest[i+1:]
		if len(f.Value) == 0 {
			return bad("the value is empty")
		}
		if !strings.Contains(f.Host, ".") {
			return bad("%q is not a host name with a domain (an inline value takes no header: for a header, store the value with 'agentkernel secret set' and use KEY:HOST:HEADER)", f.Host)
		}
	} else {
		if strings.Contains(s, "/") {
			return bad("give the host name alone, without a scheme or path")
		}
		parts := strings.Split(s, ":")
		switch len(parts) {
		case 2:
			f.Key, f.Host = parts[0], parts[1]
		case 3:
			f.Key, f.Host, f.Header = parts[0], parts[1], parts[2]
			if !validHeaderName(f.Header) {
				return bad("%q is not a header name", f.Header)
			}
		default:
			return bad("expected KEY:HOST or KEY:HOST:HEADER")
		}
	}
	if err := checkSecretKey(f.Key); err != nil {
		return bad("%v", err)
	}
	f.Host = strings.ToLower(strings.TrimSuffix(f.Host, "."))
	if err := checkSecretHost(f.Host); err != nil {
		return bad("%v", err)
	}
	return f, nil
}

// redactBinding is a binding as errors may quote it: an inline value is
// replaced.
func redactBinding(s string) string {
	eq, colon := strings.IndexByte(s, '='), strings.IndexByte(s, ':')
	if eq >= 0 && (colon < 0 || eq < colon) {
		host := ""
		if i := strings.LastIndexByte(s[eq+1:], ':'); i >= 0 {
			host = s[eq+1:][i:]
		}
		return fmt.Sprintf("%.130q", s[:eq]+"=…"+host)
	}
	return fmt.Sprintf("%.300q", s)
}

// checkSecretKey is the vault's rule for names ([A-Za-z0-9_-]{1,128});
// the same name is the placeholder's variable inside.
func checkSecretKey(k string) error {
	if k == "" {
		return errors.New("the secret's name is empty")
	}
	if len(k) > 128 {
		return errors.New("the secret's name is longer than 128 characters")
	}
	for _, c := range []byte(k) {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("invalid secret name %q: only A-Z, a-z, 0-9, '_' and '-'", k)
		}
	}
	return nil
}

// checkSecretHost accepts an exact DNS name (no wildcard, port or
// address: TLS clients send no server name for an address).
func checkSecretHost(h string) error {
	if h == "" {
		return errors.New("the host is empty")
	}
	if _, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return fmt.Errorf("%q is an address: bind a host name (TLS clients send no server name for an address)", h)
	}
	if len(h) > 253 {
		return fmt.Errorf("host %.40q… is longer than a DNS name", h)
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("%q is not a host name (exact names only: no wildcard, port or scheme)", h)
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("%q is not a host name (exact names only: no wildcard, port or scheme)", h)
			}
		}
	}
	return nil
}

func validHeaderName(h string) bool {
	if h == "" || len(h) > 128 {
		return false
	}
	for _, c := range []byte(h) {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// parseSecretFlags parses a run's -S flags; a binding of a key twice to
// the same host and header is an error.
func parseSecretFlags(ss []string) ([]SecretFlag, error) {
	if len(ss) > maxSecretFlags {
		return nil, fmt.Errorf("-S/--secret: %d bindings, more than %d", len(ss), maxSecretFlags)
	}
	var out []SecretFlag
	seen := map[string]string{}
	for _, s := range ss {
		f, err := ParseSecretFlag(s)
		if err != nil {
			return nil, err
		}
		slot := secretSlot(f)
		if k, ok := seen[slot]; ok {
			return nil, fmt.Errorf("-S/--secret: %s and %s both go in header %s of %s: give one", k, f.Key, strings.Fields(slot)[1], f.Host)
		}
		seen[slot] = f.Key
		out = append(out, f)
	}
	return out, nil
}

// checkSecretRun refuses -S where it is not supported yet, before
// anything is resolved, and takes the [secrets] bindings of trusted
// configuration (ConfigSecretFlags) for a run that can have them.
func (a *App) checkSecretRun(o *RunOptions) error {
	if err := a.takeConfigSecrets(o); err != nil {
		return err
	}
	if err := checkSecretFileFlags(o); err != nil {
		return err
	}
	if len(o.secrets) == 0 && len(o.cfgSecret) == 0 && len(o.secretFiles) == 0 {
		return nil
	}
	if a.ResolveSecrets == nil || (len(o.secretFiles) > 0 && a.SecretValues == nil) {
		// The vault and the CA are agentkernel-full's.
		return fmt.Errorf("%w: -S/--secret", ErrNeedsFull)
	}
	if len(o.secrets) > 0 || len(o.secretFiles) > 0 {
		flag := "-S/--secret"
		if len(o.secrets) == 0 {
			flag = "--secret-file"
		}
		if o.habits.persistent() {
			return &ExitError{Code: ExitAgentkernel, Err: errors.New(flag + " with --keep, --name, -d or --branch: 'agentkernel run' does not bind secrets for persistent sandboxes (secrets are not supported for persistent sandboxes made by run), only for a plain run"),
				Hint: "create the sandbox with 'agentkernel sandbox create NAME -S KEY:HOST' (its -S bindings then hold across restarts), and run commands in it with 'agentkernel exec NAME -- CMD'"}
		}
		if o.overrides.Keep {
			return &ExitError{Code: ExitAgentkernel, Err: errors.New(flag + " with --keep is not supported yet")}
		}
		if b := strings.ToLower(o.backend); b != "" && b != "native" && b != "gvisor" && b != AutoBackend {
			return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("%s is not supported by backend %s", flag, o.backend)}
		}
	}
	// The daemon's pool cannot take secrets: the run is built here.
	o.noDaemon = true
	return nil
}

// takeConfigSecrets sets o.cfgSecret to the [secrets] bindings of
// trusted configuration, unless the run cannot have secrets (then it
// says so and leaves them out). A project file's bindings are ignored,
// with a warning. A configuration that does not load is left to the
// run's own loading, which reports it.
func (a *App) takeConfigSecrets(o *RunOptions) error {
	cwd, err := os.Getwd()
	if err != nil {
		return nil
	}
	cfg, _, err := config.Load(a.loadOptions(cwd))
	if err != nil {
		return nil
	}
	flags, err := a.TrustedSecretFlags(cfg)
	if err != nil {
		return err
	}
	if len(flags) == 0 {
		return nil
	}
	why := ""
	switch {
	case o.habits.persistent():
		why = "a persistent sandbox (--keep, --name, -d, --branch)"
	case o.overrides.Keep:
		why = "--keep"
	case o.backend != "" && !strings.EqualFold(o.backend, "native") && !strings.EqualFold(o.backend, "gvisor") && !strings.EqualFold(o.backend, AutoBackend):
		why = "backend " + o.backend
	}
	if why != "" {
		hint := ""
		if why == "a persistent sandbox (--keep, --name, -d, --branch)" {
			hint = " (a sandbox made with 'agentkernel sandbox create' gets them)"
		}
		a.Warnf("the [secrets] bindings of the configuration are not applied: 'agentkernel run' does not bind secrets for %s%s", why, hint)
		return nil
	}
	o.cfgSecret = flags
	return nil
}

// TrustedSecretFlags returns the [secrets] bindings of cfg that trusted
// configuration made (ConfigSecretFlags: the user's own file, or
// --config), warning about those a project's agentkernel.toml set, which
// are ignored. Its error is exit status 125.
func (a *App) TrustedSecretFlags(cfg *config.Config) ([]SecretFlag, error) {
	flags, ignored, err := ConfigSecretFlags(cfg, a.ConfigPath != "")
	if err != nil {
		return nil, &ExitError{Code: ExitAgentkernel, Err: err, Hint: "fix the binding in the configuration file"}
	}
	if len(ignored) > 0 {
		// The names are the project file's: quoted, a few.
		names := make([]string, 0, 5)
		for i, k := range ignored {
			if i == 4 && len(ignored) > 5 {
				names = append(names, fmt.Sprintf("and %d more", len(ignored)-4))
				break
			}
			names = append(names, fmt.Sprintf("%.60q", k))
		}
		a.Warnf("ignoring [secrets] binding %s of %s: a project's agentkernel.toml may not bind secrets (it could send them to a host of its choosing); bind them in your own configuration file (%s) or give -S", strings.Join(names, ", "), projectFileSource(cfg, ignored[0]), userConfigHint())
	}
	return flags, nil
}

// userConfigHint names the user-wide configuration file.
func userConfigHint() string {
	if p := config.UserPath(os.Getenv); p != "" {
		return p
	}
	return "~/.config/agentkernel/config.toml"
}

// projectFileSource is where the [secrets] binding key was set.
func projectFileSource(cfg *config.Config, key string) string {
	return cfg.Source("secrets." + key).String()
}

// ConfigSecretFlags returns the [secrets] bindings (KEY = {host, header})
// of trusted configuration as -S bindings, sorted by key: the user-wide
// file's, and with explicit (--config given) the project file's too. A
// binding that a project file found in the working directory set, or
// changed, is not returned but named in ignored: a project could bind a
// vault key to a host of its choosing and so send the secret there.
func ConfigSecretFlags(cfg *config.Config, explicit bool) (flags []SecretFlag, ignored []string, err error) {
	keys := make([]string, 0, len(cfg.Secrets.Bindings))
	for k := range cfg.Secrets.Bindings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	trusted := func(key string) bool {
		s, ok := cfg.Sources[key]
		return !ok || s.Kind == config.SourceUser || s.Kind == config.SourceDefault || s.Kind == "" || (s.Kind == config.SourceProject && explicit)
	}
	for _, k := range keys {
		b := cfg.Secrets.Bindings[k]
		name := "secrets." + k
		if !trusted(name) || !trusted(name+".host") || !trusted(name+".header") {
			ignored = append(ignored, k)
			continue
		}
		f := SecretFlag{Key: k, Host: strings.ToLower(strings.TrimSuffix(b.Host, ".")), Header: b.Header}
		err := checkSecretKey(k)
		if err == nil {
			err = checkSecretHost(f.Host)
		}
		if err == nil && f.Header != "" && !validHeaderName(f.Header) {
			err = fmt.Errorf("%q is not a header name", f.Header)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("[secrets] %.130q (%s): %v", k, cfg.Source(name), err)
		}
		flags = append(flags, f)
	}
	if len(flags) > maxSecretFlags {
		return nil, nil, fmt.Errorf("[secrets]: %d bindings, more than %d", len(flags), maxSecretFlags)
	}
	return flags, ignored, nil
}

// bindSecrets parses a run's -S flags, adds the [secrets] bindings of
// trusted configuration (those whose host the network policy lets
// through, and whose header of that host no -S takes), checks them
// against spec's network policy and sets spec.Secrets through
// App.ResolveSecrets (the vault's values, the sandbox's CA:
// agentkernel-full's). Every failure is exit status 125.
func (a *App) bindSecrets(ctx context.Context, o *RunOptions, spec *sandbox.Spec) error {
	flags, err := a.secretFlags(o, spec, "see 'agentkernel run --help' (Secrets)")
	if err != nil {
		return err
	}
	if len(flags) > 0 {
		if err := a.resolveSecretFlags(ctx, flags, spec); err != nil {
			return err
		}
	}
	return a.bindSecretFiles(ctx, o, spec)
}

// secretFlags parses o's -S flags and adds the configuration's bindings
// (o.cfgSecret) as bindSecrets says, all checked against spec's network
// policy.
func (a *App) secretFlags(o *RunOptions, spec *sandbox.Spec, hint string) ([]SecretFlag, error) {
	if len(o.secrets) == 0 && len(o.cfgSecret) == 0 {
		return nil, nil
	}
	fail := func(err error, hint string) ([]SecretFlag, error) {
		return nil, &ExitError{Code: ExitAgentkernel, Err: err, Hint: hint}
	}
	flags, err := parseSecretFlags(o.secrets)
	if err != nil {
		return fail(err, hint)
	}
	if len(flags) > 0 {
		if err := checkSecretHosts(spec.Network, flags); err != nil {
			return nil, err
		}
	}
	taken := map[string]bool{}
	for _, f := range flags {
		taken[secretSlot(f)] = true
	}
	for _, f := range o.cfgSecret {
		if taken[secretSlot(f)] {
			continue
		}
		if err := checkSecretHosts(spec.Network, []SecretFlag{f}); err != nil {
			if spec.Network.Mode.Egress() {
				a.Warnf("[secrets] binding %s not applied: %s is not reachable under this run's network policy", f.Key, f.Host)
			}
			continue
		}
		taken[secretSlot(f)] = true
		flags = append(flags, f)
	}
	if len(flags) > maxSecretFlags {
		return fail(fmt.Errorf("-S/--secret and [secrets]: %d bindings, more than %d", len(flags), maxSecretFlags), "")
	}
	return flags, nil
}

// BindSecrets gives spec the secret bindings (the forms of -S/--secret:
// KEY:HOST, KEY:HOST:HEADER, KEY=VALUE:HOST) as a run's -S flags would,
// with the same checks and the same vault lookup, and, with cfg, the
// [secrets] bindings of its trusted configuration (TrustedSecretFlags)
// as a run's configuration gives them: the one resolution of the HTTP
// API's "secrets" and of the server-side bindings of API and MCP runs.
// Its errors never hold a value.
func (a *App) BindSecrets(ctx context.Context, bindings []string, cfg *config.Config, spec *sandbox.Spec) error {
	if ctx == nil {
		ctx = context.Background()
	}
	o := &RunOptions{secrets: bindings}
	if cfg != nil {
		flags, err := a.TrustedSecretFlags(cfg)
		if err != nil {
			return err
		}
		o.cfgSecret = flags
	}
	return a.bindSecrets(ctx, o, spec)
}

// BindSandboxSecrets records in spec (a persistent sandbox's, for
// sandbox create and the HTTP API's POST /sandboxes) its secret
// bindings: bindings in the forms of -S and cfg's [secrets] bindings of
// trusted configuration (TrustedSecretFlags), with the checks of a run's
// (the network policy, the vault holds every key: each value is looked
// up, then forgotten), as spec.SecretBindings: names, hosts, headers and
// the vault's backend, never a value. The sandbox's supervisor resolves
// them again at each start. An inline value (KEY=VALUE:HOST) is refused:
// a persistent sandbox needs its values at every start, and the one
// place agentkernel keeps a value is the vault. Every failure is exit
// status 125 (and the API's 400), never holding a value.
func (a *App) BindSandboxSecrets(ctx context.Context, bindings []string, cfg *config.Config, spec *sandbox.Spec) error {
	if ctx == nil {
		ctx = context.Background()
	}
	cfgFlags, err := a.TrustedSecretFlags(cfg)
	if err != nil {
		return err
	}
	flags, err := a.secretFlags(&RunOptions{secrets: bindings, cfgSecret: cfgFlags}, spec, "see 'agentkernel sandbox create --help'")
	if err != nil || len(flags) == 0 {
		return err
	}
	for _, f := range flags {
		if f.Inline() {
			return &ExitError{Code: ExitAgentkernel,
				Err:  fmt.Errorf("-S/--secret %s=…:%s: a persistent sandbox takes no inline value (it needs the value at every start, and values are kept only in the vault)", f.Key, f.Host),
				Hint: "store it with 'agentkernel secret set " + f.Key + "', then give -S " + f.Key + ":" + f.Host}
		}
	}
	if err := a.resolveSecretFlags(ctx, flags, spec); err != nil {
		return err
	}
	// The values and the CA were only a check: the supervisor makes its
	// own at each start.
	spec.Secrets = nil
	rec := &sandbox.SecretBindings{Backend: cfg.Secrets.Backend}
	if rec.Backend == "file" {
		rec.Backend = ""
	}
	for _, f := range flags {
		rec.Bindings = append(rec.Bindings, sandbox.SecretRef{Key: f.Key, Host: f.Host, Header: f.Header})
	}
	spec.SecretBindings = rec
	return nil
}

// resolveSecretFlags sets spec.Secrets for flags, checked already,
// through App.ResolveSecrets.
func (a *App) resolveSecretFlags(ctx context.Context, flags []SecretFlag, spec *sandbox.Spec) error {
	if a.ResolveSecrets == nil {
		return fmt.Errorf("%w: -S/--secret", ErrNeedsFull)
	}
	s, err := a.ResolveSecrets(ctx, flags)
	if err != nil {
		var ee *ExitError
		if errors.As(err, &ee) {
			return err
		}
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	spec.Secrets = s
	return nil
}

// secretSlot is the header of a host a binding fills.
func secretSlot(f SecretFlag) string {
	h := f.Header
	if h == "" {
		h = "authorization"
	}
	return f.Host + " " + strings.ToLower(h)
}

// checkSecretHosts refuses bindings the network policy would not let
// through: a binding never widens the policy.
func checkSecretHosts(n sandbox.Network, flags []SecretFlag) error {
	if !n.Mode.Egress() {
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("-S/--secret needs network egress, and this sandbox's network is %s", n.Mode),
			Hint: "give --network filtered --allow-domain HOST (or --network full)"}
	}
	for _, f := range flags {
		for _, b := range n.BlockDomains {
			if policy.DomainMatches(b, f.Host) {
				return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("-S/--secret %s: %s is blocked by the network policy (%s)", f.Key, f.Host, b)}
			}
		}
		if n.Mode != sandbox.NetworkFiltered {
			continue
		}
		allowed := false
		for _, p := range n.AllowDomains {
			if policy.DomainMatches(p, f.Host) {
				allowed = true
				break
			}
		}
		if !allowed {
			return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("-S/--secret %s: %s is not allowed by the filtered network policy, and a binding does not allow it", f.Key, f.Host),
				Hint: "add --allow-domain " + f.Host}
		}
	}
	return nil
}

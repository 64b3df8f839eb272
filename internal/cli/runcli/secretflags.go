package runcli

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/spf13/pflag"

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
never widens the network policy. -S is for 'agentkernel run' only so far
(not with --name, -d, --branch or --keep), and never goes through the daemon.`

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
		h := f.Header
		if h == "" {
			h = "authorization"
		}
		slot := f.Host + " " + strings.ToLower(h)
		if k, ok := seen[slot]; ok {
			return nil, fmt.Errorf("-S/--secret: %s and %s both go in header %s of %s: give one", k, f.Key, h, f.Host)
		}
		seen[slot] = f.Key
		out = append(out, f)
	}
	return out, nil
}

// checkSecretRun refuses -S where it is not supported yet, before
// anything is resolved.
func (a *App) checkSecretRun(o *RunOptions) error {
	if len(o.secrets) == 0 {
		return nil
	}
	if a.ResolveSecrets == nil {
		// The vault and the CA are agentkernel-full's.
		return fmt.Errorf("%w: -S/--secret", ErrNeedsFull)
	}
	if o.habits.persistent() {
		return &ExitError{Code: ExitAgentkernel, Err: errors.New("-S/--secret with --name, -d or --branch: secrets are not supported for persistent sandboxes yet, only for a plain 'agentkernel run'"),
			Hint: "drop --name/-d/--branch, or give the value to the sandbox another way"}
	}
	if o.overrides.Keep {
		return &ExitError{Code: ExitAgentkernel, Err: errors.New("-S/--secret with --keep is not supported yet")}
	}
	if b := strings.ToLower(o.backend); b != "" && b != "native" {
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("-S/--secret is not supported by backend %s", o.backend)}
	}
	// The daemon's pool cannot take secrets: the run is built here.
	o.noDaemon = true
	return nil
}

// bindSecrets parses a run's -S flags, checks them against spec's network
// policy and sets spec.Secrets through App.ResolveSecrets (the vault's
// values, the sandbox's CA: agentkernel-full's). Every failure is exit
// status 125.
func (a *App) bindSecrets(ctx context.Context, o *RunOptions, spec *sandbox.Spec) error {
	if len(o.secrets) == 0 {
		return nil
	}
	fail := func(err error, hint string) error {
		return &ExitError{Code: ExitAgentkernel, Err: err, Hint: hint}
	}
	flags, err := parseSecretFlags(o.secrets)
	if err != nil {
		return fail(err, "see 'agentkernel run --help' (Secrets)")
	}
	if err := checkSecretHosts(spec.Network, flags); err != nil {
		return err
	}
	if a.ResolveSecrets == nil {
		return fmt.Errorf("%w: -S/--secret", ErrNeedsFull)
	}
	s, err := a.ResolveSecrets(ctx, flags)
	if err != nil {
		var ee *ExitError
		if errors.As(err, &ee) {
			return err
		}
		return fail(err, "")
	}
	spec.Secrets = s
	return nil
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

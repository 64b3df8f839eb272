package cli

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/netpolicy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/secrets"
)

// resolveSecrets is runcli.App.ResolveSecrets: a run's -S bindings with
// their values (inline, or from the vault of [secrets] backend) and the
// sandbox's CA, made for this run and constrained to the bound hosts. The
// CA's key stays in memory, with the run and its network helper.
func (a *App) resolveSecrets(ctx context.Context, flags []runcli.SecretFlag) (*sandbox.Secrets, error) {
	s := &sandbox.Secrets{}
	var vault secrets.Vault
	var hosts []string
	seenHost := map[string]bool{}
	for _, f := range flags {
		b := sandbox.SecretBinding{Key: f.Key, Host: f.Host, Header: f.Header, Value: f.Value}
		if !f.Inline() {
			if vault == nil {
				cwd, err := os.Getwd()
				if err != nil {
					return nil, err
				}
				cfg, err := a.LoadConfig(cwd)
				if err != nil {
					return nil, err
				}
				if vault, err = secrets.Open(secrets.Options{Backend: cfg.Secrets.Backend, DataDir: a.DataDir}); err != nil {
					return nil, secretRunError(f.Key, err)
				}
			}
			v, err := vault.Get(f.Key)
			if err != nil {
				return nil, secretRunError(f.Key, err)
			}
			b.Value = v
		}
		s.Bindings = append(s.Bindings, b)
		if !seenHost[f.Host] {
			seenHost[f.Host] = true
			hosts = append(hosts, f.Host)
		}
	}
	ca, certPEM, err := netpolicy.NewCA("run", hosts...)
	if err != nil {
		return nil, err
	}
	// The injector's own rules (a value a header can carry, one secret
	// per header of a host), checked now rather than when the sandbox
	// first reaches the network, in its helper.
	in := &netpolicy.Injection{CA: ca, Roots: x509.NewCertPool()}
	for _, b := range s.Bindings {
		in.Bindings = append(in.Bindings, netpolicy.Binding{Key: b.Key, Host: b.Host, Header: b.Header, Value: b.Value})
	}
	e, err := netpolicy.Compile(sandbox.Network{Mode: sandbox.NetworkNone}, netpolicy.Options{Inject: in})
	if err != nil {
		return nil, &runcli.ExitError{Code: runcli.ExitAgentkernel, Err: fmt.Errorf("-S/--secret: %w", err)}
	}
	e.Close()
	key, err := x509.MarshalPKCS8PrivateKey(ca.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("secret injection CA: %w", err)
	}
	s.CACert, s.CAKey = certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key})
	h, err := netpolicy.SubjectHash(ca.Leaf.RawSubject)
	if err != nil {
		return nil, fmt.Errorf("secret injection CA: %w", err)
	}
	s.CAHash = fmt.Sprintf("%08x", h)
	return s, nil
}

// secretValues is runcli.App.SecretValues: the vault's values of a run's
// --secret-file keys.
func (a *App) secretValues(_ context.Context, keys []string) ([][]byte, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	cfg, err := a.LoadConfig(cwd)
	if err != nil {
		return nil, err
	}
	vault, err := secrets.Open(secrets.Options{Backend: cfg.Secrets.Backend, DataDir: a.DataDir})
	if err != nil {
		return nil, secretFlagError("--secret-file", keys[0], err)
	}
	vs := make([][]byte, len(keys))
	for i, k := range keys {
		if vs[i], err = vault.Get(k); err != nil {
			return nil, secretFlagError("--secret-file", k, err)
		}
	}
	return vs, nil
}

// secretRunError is a vault failure of a run's -S binding: exit status
// 125, the secret named.
func secretRunError(key string, err error) error { return secretFlagError("-S/--secret", key, err) }

// secretFlagError is a vault failure of a run's flag for key: exit status
// 125, the secret named.
func secretFlagError(flag, key string, err error) error {
	hint := ""
	switch {
	case errors.Is(err, secrets.ErrNotFound):
		hint = "store it with 'agentkernel secret set " + key + "' ('agentkernel secret list' shows the stored names)"
		if flag == "-S/--secret" {
			hint += ", or give it inline as " + key + "=VALUE:HOST"
		}
		return &runcli.ExitError{Code: runcli.ExitAgentkernel, Err: fmt.Errorf("%s %s: secret '%s' is not in the vault", flag, key, key), Hint: hint}
	case errors.Is(err, secrets.ErrWrongKey), errors.Is(err, secrets.ErrBadKey), errors.Is(err, secrets.ErrCorrupt), errors.Is(err, secrets.ErrInsecure):
		hint = "see 'agentkernel secret --help'"
	}
	return &runcli.ExitError{Code: runcli.ExitAgentkernel, Err: fmt.Errorf("%s %s: %w", flag, key, err), Hint: hint}
}

// errSecretsRunOnly refuses secret bindings where they are not supported
// yet: a persistent sandbox cannot keep them across its restarts.
func errSecretsRunOnly(where string) error {
	return &runcli.ExitError{Code: runcli.ExitAgentkernel,
		Err:  fmt.Errorf("%s: -S/--secret is not supported for persistent sandboxes yet: secrets work with 'agentkernel run' only for now", where),
		Hint: "run the command with 'agentkernel run -S KEY:HOST -- CMD' instead"}
}

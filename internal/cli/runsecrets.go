package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentkernel/agentkernel/internal/atomicfile"
	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/config"
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
				var err error
				if vault, err = a.runVault(); err != nil {
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
	if err := checkInjection(s, ca); err != nil {
		return nil, err
	}
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

// checkInjection checks s's bindings with the CA against the injector's
// own rules (a value a header can carry, one secret per header of a
// host) now, rather than when the sandbox first reaches the network, in
// its helper.
func checkInjection(s *sandbox.Secrets, ca tls.Certificate) error {
	in := &netpolicy.Injection{CA: ca, Roots: x509.NewCertPool()}
	for _, b := range s.Bindings {
		in.Bindings = append(in.Bindings, netpolicy.Binding{Key: b.Key, Host: b.Host, Header: b.Header, Value: b.Value})
	}
	e, err := netpolicy.Compile(sandbox.Network{Mode: sandbox.NetworkNone}, netpolicy.Options{Inject: in})
	if err != nil {
		return &runcli.ExitError{Code: runcli.ExitAgentkernel, Err: fmt.Errorf("-S/--secret: %w", err)}
	}
	e.Close()
	return nil
}

// sandboxSecrets resolves a persistent sandbox's recorded bindings
// (spec.SecretBindings) for one start, in its supervisor: each key's
// value from the vault it was recorded with (a key deleted since fails
// the start, named), and the sandbox's CA from its directory dir
// (sandbox.SecretCAFile), made there at the first start with secrets and
// kept, so that the trust store of every start holds the same CA.
func sandboxSecrets(dataDir, dir string, spec *sandbox.Spec) (*sandbox.Secrets, error) {
	rec := spec.SecretBindings
	if rec == nil || len(rec.Bindings) == 0 {
		return nil, nil
	}
	vault, err := secrets.Open(secrets.Options{Backend: rec.Backend, DataDir: dataDir})
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: the secrets vault: %w", spec.Name, err)
	}
	s := &sandbox.Secrets{}
	var hosts []string
	seenHost := map[string]bool{}
	for _, r := range rec.Bindings {
		v, err := vault.Get(r.Key)
		if errors.Is(err, secrets.ErrNotFound) {
			return nil, fmt.Errorf("sandbox %s: secret '%s' (bound to %s) is not in the vault: store it again with 'agentkernel secret set %s', or re-create the sandbox without it", spec.Name, r.Key, r.Host, r.Key)
		}
		if err != nil {
			return nil, fmt.Errorf("sandbox %s: secret '%s': %w", spec.Name, r.Key, err)
		}
		s.Bindings = append(s.Bindings, sandbox.SecretBinding{Key: r.Key, Host: r.Host, Header: r.Header, Value: v})
		if !seenHost[r.Host] {
			seenHost[r.Host] = true
			hosts = append(hosts, r.Host)
		}
	}
	ca, certPEM, keyPEM, err := sandboxCA(dir, spec.Name, hosts)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", spec.Name, err)
	}
	if err := checkInjection(s, ca); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", spec.Name, err)
	}
	s.CACert, s.CAKey = certPEM, keyPEM
	h, err := netpolicy.SubjectHash(ca.Leaf.RawSubject)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: its secret injection CA: %w", spec.Name, err)
	}
	s.CAHash = fmt.Sprintf("%08x", h)
	return s, nil
}

// sandboxCA is the CA of the persistent sandbox whose directory is dir,
// for hosts: the one in dir/sandbox.SecretCAFile, or a new one written
// there (0600, through atomicfile) when there is none, or when the one
// there no longer covers hosts or nears its end. A file that is not the
// user's own regular file closed to others, or that holds no CA, is
// refused with the fix.
func sandboxCA(dir, name string, hosts []string) (ca tls.Certificate, certPEM, keyPEM []byte, err error) {
	p := filepath.Join(dir, sandbox.SecretCAFile)
	b, err := readPrivateFile(p, 64<<10)
	switch {
	case err == nil:
		ca, certPEM, keyPEM, err = parseCA(b)
		if err != nil {
			return tls.Certificate{}, nil, nil, fmt.Errorf("its secret injection CA %s: %v (remove the file: a new CA is made at the next start)", p, err)
		}
		if caCovers(ca.Leaf, hosts, time.Now()) {
			return ca, certPEM, keyPEM, nil
		}
	case !errors.Is(err, fs.ErrNotExist):
		return tls.Certificate{}, nil, nil, fmt.Errorf("its secret injection CA: %w", err)
	}
	ca, certPEM, err = netpolicy.NewCA(name, hosts...)
	if err != nil {
		return tls.Certificate{}, nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(ca.PrivateKey)
	if err != nil {
		return tls.Certificate{}, nil, nil, fmt.Errorf("secret injection CA: %w", err)
	}
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := atomicfile.WriteFile(p, append(append([]byte(nil), certPEM...), keyPEM...), 0o600); err != nil {
		return tls.Certificate{}, nil, nil, fmt.Errorf("writing its secret injection CA: %w", err)
	}
	return ca, certPEM, keyPEM, nil
}

// parseCA reads a CA file's certificate and private key (PEM).
func parseCA(b []byte) (ca tls.Certificate, certPEM, keyPEM []byte, err error) {
	var certBlock, keyBlock *pem.Block
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		switch {
		case blk.Type == "CERTIFICATE" && certBlock == nil:
			certBlock = blk
		case blk.Type == "PRIVATE KEY" && keyBlock == nil:
			keyBlock = blk
		}
	}
	if certBlock == nil || keyBlock == nil {
		return tls.Certificate{}, nil, nil, errors.New("no certificate and private key in it")
	}
	certPEM, keyPEM = pem.EncodeToMemory(certBlock), pem.EncodeToMemory(keyBlock)
	ca, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, nil, nil, err
	}
	if ca.Leaf == nil {
		if ca.Leaf, err = x509.ParseCertificate(ca.Certificate[0]); err != nil {
			return tls.Certificate{}, nil, nil, err
		}
	}
	if !ca.Leaf.IsCA {
		return tls.Certificate{}, nil, nil, errors.New("its certificate is not a CA's")
	}
	return ca, certPEM, keyPEM, nil
}

// caCovers reports whether the CA cert may vouch for every host (its
// name constraints) for at least another day.
func caCovers(cert *x509.Certificate, hosts []string, now time.Time) bool {
	if now.Add(24 * time.Hour).After(cert.NotAfter) {
		return false
	}
	for _, h := range hosts {
		ok := len(cert.PermittedDNSDomains) == 0
		for _, d := range cert.PermittedDNSDomains {
			d = strings.ToLower(strings.TrimPrefix(d, "."))
			if h == d || strings.HasSuffix(h, "."+d) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// readPrivateFile reads a file of at most max bytes that must be the
// user's own regular file, closed to group and others, without
// following a last symbolic link.
func readPrivateFile(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > max {
		return nil, fmt.Errorf("%s is not a regular file of a CA's size", path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm()&0o077 != 0 || !ok || int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%s must be your own file, closed to others (chmod 600 %s)", path, path)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// runVault opens the vault a run in the working directory uses (its
// configuration's [secrets] backend).
func (a *App) runVault() (secrets.Vault, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	cfg, err := a.LoadConfig(cwd)
	if err != nil {
		return nil, err
	}
	return secrets.Open(secrets.Options{Backend: cfg.Secrets.Backend, DataDir: a.DataDir})
}

// secretValues is runcli.App.SecretValues: the vault's values of a run's
// --secret-file keys.
func (a *App) secretValues(_ context.Context, keys []string) ([][]byte, error) {
	vault, err := a.runVault()
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
			hint += ", or (for a run) give it inline as " + key + "=VALUE:HOST"
		}
		return &runcli.ExitError{Code: runcli.ExitAgentkernel, Err: fmt.Errorf("%s %s: secret '%s' is not in the vault", flag, key, key), Hint: hint}
	case errors.Is(err, secrets.ErrWrongKey), errors.Is(err, secrets.ErrBadKey), errors.Is(err, secrets.ErrCorrupt), errors.Is(err, secrets.ErrInsecure):
		hint = "see 'agentkernel secret --help'"
	}
	return &runcli.ExitError{Code: runcli.ExitAgentkernel, Err: fmt.Errorf("%s %s: %w", flag, key, err), Hint: hint}
}

// serverSecrets is mcp.Options.ServerSecrets: the [secrets] bindings of
// the MCP server's own configuration cfg for a run (their values and a
// CA for it) or a created sandbox (recorded without values).
func (a *App) serverSecrets(ctx context.Context, cfg *config.Config, spec *sandbox.Spec, persistent bool) error {
	if persistent {
		return a.BindSandboxSecrets(ctx, nil, cfg, spec)
	}
	return a.BindSecrets(ctx, nil, cfg, spec)
}

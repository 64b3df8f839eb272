package native

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Secret injection (run -S, sandbox.Secrets): the secrets' values and the
// CA's private key stay with the sandbox's owner and its network helper
// (netproc.Config.Inject); the sandbox gets the CA's certificate in its
// trust store and, in each bound secret's variable, the placeholder.

// systemBundles are where images keep their CA bundle, in the order they
// are looked for (Debian/Ubuntu/Alpine, Fedora/RHEL, others).
var systemBundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// sandboxCA is where the sandbox's CA certificate alone is found inside.
const sandboxCA = "/etc/agentkernel/ca.crt"

// maxBundle bounds the image's CA bundle that is read.
const maxBundle = 16 << 20

// trustVars are the variables that point programs at the bundle.
var trustVars = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"}

// secretConfig checks a spec's secrets against the sandbox they go in and
// gives the init the CA's certificate and the command its placeholders.
func (r *runState) secretConfig(cfg *initConfig) error {
	s := r.spec.Secrets
	if s == nil || len(s.Bindings) == 0 {
		return nil
	}
	switch {
	case r.persistent || r.prepared:
		return errors.New("secret injection (-S/--secret) is not supported for persistent or pooled sandboxes yet, only for 'agentkernel run'")
	case !cfg.Network:
		return errors.New("secret injection (-S/--secret) needs network egress (--network filtered or full)")
	case len(s.CACert) == 0 || len(s.CAKey) == 0:
		return errors.New("secret injection: no CA for the sandbox")
	}
	cfg.TrustCA = s.CACert
	for _, k := range s.Keys() {
		cfg.Exec.Env = setEnv(cfg.Exec.Env, k, sandbox.SecretPlaceholder)
	}
	return nil
}

// setEnv sets k to v in env, replacing an earlier value.
func setEnv(env []string, k, v string) []string {
	for i, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); name == k {
			env[i] = k + "=" + v
			return env
		}
	}
	return append(env, k+"="+v)
}

// writeTrustBundle gives the sandbox the CA of its secret injection: the
// image's system bundle with the CA appended, bound read-only over the
// image's own (or, where it has none, at the first usual path), the CA
// alone at sandboxCA (where the root can take a new file), and the
// variables that name a bundle pointing at it. SSL_CERT_DIR is left as it
// is: a hashed directory would need the image's own tools, and programs
// that read SSL_CERT_FILE (or the system bundle) first find the CA there.
// Runs in the resolver's stage, when the root is assembled.
func (s *initState) writeTrustBundle() error {
	ca := s.cfg.TrustCA
	if len(ca) == 0 {
		return nil
	}
	if !bytes.HasSuffix(ca, []byte("\n")) {
		ca = append(append([]byte(nil), ca...), '\n')
	}
	var bundle []byte
	target := ""
	for _, p := range systemBundles {
		dst, err := s.inRoot(p)
		if err != nil {
			continue
		}
		b, err := readRegular(dst, maxBundle)
		if err != nil {
			continue
		}
		bundle, target = b, dst
		break
	}
	if target == "" {
		dst, err := s.inRoot(systemBundles[0])
		if err != nil {
			return fmt.Errorf("the sandbox's CA bundle: %w", err)
		}
		target = dst
	}
	if len(bundle) > 0 && !bytes.HasSuffix(bundle, []byte("\n")) {
		bundle = append(bundle, '\n')
	}
	bundle = append(bundle, ca...)
	inside := strings.TrimPrefix(target, s.root)
	for _, f := range []struct {
		name, dst string
		body      []byte
	}{{"ca-bundle.crt", target, bundle}, {"ca.crt", "", ca}} {
		src := filepath.Join(s.scratch, f.name)
		if err := os.WriteFile(src, f.body, 0o644); err != nil {
			return err
		}
		dst := f.dst
		if dst == "" {
			var err error
			if dst, err = s.inRoot(sandboxCA); err != nil {
				return err
			}
		}
		if fi, err := os.Stat(dst); err != nil || !fi.Mode().IsRegular() {
			if err := makeMountPoint(src, dst); err != nil {
				if f.dst == "" {
					// The CA alone is a convenience: a root that
					// cannot take a new file (the host image's
					// read-only /etc) goes without it.
					continue
				}
				return fmt.Errorf("the sandbox's CA bundle cannot be placed at %s: %w", strings.TrimPrefix(dst, s.root), err)
			}
		}
		if err := bindMount(src, dst, true, false); err != nil {
			return err
		}
	}
	for _, k := range trustVars {
		s.cfg.Exec.Env = setEnv(s.cfg.Exec.Env, k, inside)
	}
	return nil
}

// readRegular reads a regular file of at most max bytes, without
// following a last symbolic link or blocking on a FIFO.
func readRegular(path string, max int64) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > max {
		return nil, errors.New("not a regular file of a CA bundle's size")
	}
	return io.ReadAll(io.LimitReader(f, max))
}

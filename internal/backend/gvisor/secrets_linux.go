package gvisor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Secret injection for runs (run -S): as native's, the secrets' values
// and the CA's private key go to the network helper only (netproc's
// Inject, startNetwork), which puts the values in the requests that
// leave for the bound hosts; the sandbox gets the placeholder in each
// bound variable and the run's CA in its trust store: the image's CA
// bundle with the CA appended, bound read-only over the bundle, the CA
// alone at /etc/agentkernel/ca.crt, and the trust variables naming the
// bundle.

// systemBundles are where images keep their CA bundle, in the order
// they are looked for (Debian/Ubuntu/Alpine, Fedora/RHEL, others).
var systemBundles = []string{"etc/ssl/certs/ca-certificates.crt", "etc/pki/tls/certs/ca-bundle.crt", "etc/ssl/cert.pem"}

// trustVars are the variables that point programs at the bundle.
var trustVars = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"}

// maxBundle bounds the image's CA bundle that is read.
const maxBundle = 16 << 20

// hasSecrets reports whether spec asks for secrets.
func hasSecrets(spec *sandbox.Spec) bool {
	s := spec.Secrets
	return s != nil && (len(s.Bindings) > 0 || len(s.Files) > 0)
}

// secretMounts checks the run's secrets, writes its trust store's files
// into the run's directory and returns their mounts; p's environment
// gets the placeholders and the trust variables.
func (r *run) secretMounts(p *process) ([]specs.Mount, error) {
	s := r.spec.Secrets
	if s == nil || len(s.Bindings) == 0 {
		return nil, nil
	}
	switch {
	case !netNeeded(r.spec) || !r.spec.Network.Mode.Egress():
		return nil, errors.New("secret injection (-S/--secret) needs network egress (--network filtered or full)")
	case len(s.CACert) == 0 || len(s.CAKey) == 0:
		return nil, errors.New("secret injection: no CA for the sandbox")
	}
	ca := s.CACert
	if !bytes.HasSuffix(ca, []byte("\n")) {
		ca = append(append([]byte(nil), ca...), '\n')
	}
	rootFd, err := unix.Open(r.rootfs(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(rootFd)
	target, bundle := systemBundles[0], []byte(nil)
	for _, name := range systemBundles {
		if b, err := readInRoot(rootFd, name, maxBundle); err == nil {
			target, bundle = name, b
			break
		}
	}
	if len(bundle) > 0 && !bytes.HasSuffix(bundle, []byte("\n")) {
		bundle = append(bundle, '\n')
	}
	bundle = append(bundle, ca...)
	var mounts []specs.Mount
	for _, f := range []struct {
		name, dst string
		body      []byte
		optional  bool
	}{{"ca-bundle.crt", target, bundle, false}, {"ca.crt", "etc/agentkernel/ca.crt", ca, true}} {
		src := filepath.Join(r.dir, f.name)
		if err := os.WriteFile(src, f.body, 0o644); err != nil {
			return nil, err
		}
		if err := secretMountPoint(rootFd, r.rootfs(), f.dst); err != nil {
			if f.optional {
				continue // a convenience: a root that cannot take it goes without
			}
			return nil, fmt.Errorf("the sandbox's CA bundle cannot be placed at /%s: %w", f.dst, err)
		}
		mounts = append(mounts, specs.Mount{Destination: "/" + f.dst, Type: "bind", Source: src, Options: []string{"rbind", "ro"}})
	}
	for _, k := range trustVars {
		p.env = setEnv(p.env, k, "/"+target)
	}
	for _, k := range s.Keys() {
		p.env = setEnv(p.env, k, sandbox.SecretPlaceholder)
	}
	return mounts, nil
}

// secretMountPoint makes the file name (relative to the root) a mount
// point where it is missing: its parent directories made inside the
// root, never through a link that leads out of it.
func secretMountPoint(rootFd int, root, name string) error {
	dir := filepath.Dir(name)
	parts := strings.Split(dir, "/")
	for i := range parts {
		parent := strings.Join(parts[:i], "/")
		if parent == "" {
			parent = "."
		}
		how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
		pfd, err := unix.Openat2(rootFd, parent, &how)
		if err != nil {
			return err
		}
		// mkdirat never follows its last component.
		err = unix.Mkdirat(pfd, parts[i], 0o755)
		unix.Close(pfd)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
	}
	return mountPointIn(root, name)
}

// readInRoot reads the regular file name inside the root (resolved as
// the sandbox resolves it, no magic links), max bytes at most.
func readInRoot(rootFd int, name string, max int64) ([]byte, error) {
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(rootFd, name, &how)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("/%s: not a regular file", name)
	}
	if st.Size() > max {
		return nil, fmt.Errorf("/%s: over %d bytes", name, max)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// setEnv sets k to v in env, replacing an earlier value.
func setEnv(env []string, k, v string) []string {
	if i := envIndex(env, k); i >= 0 {
		env[i] = k + "=" + v
		return env
	}
	return append(env, k+"="+v)
}

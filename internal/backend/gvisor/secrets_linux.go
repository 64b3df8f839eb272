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

	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Secret injection (run -S, sandbox create -S) as native's: the
// secrets' values and the CA's private key go to the network helper only
// (netproc's Inject, startNetwork), which puts the values in the
// requests that leave for the bound hosts; the sandbox gets the
// placeholder in each bound variable and the CA in its trust store: the
// image's CA bundle with the CA appended, bound read-only over the
// bundle, the CA alone at /etc/agentkernel/ca.crt, and the trust
// variables naming the bundle. A persistent sandbox gets them at each
// boot (its supervisor resolves the values and keeps the CA), its
// variables in the environment of every exec (run.secretEnv).
//
// Secret files (run --secret-file) as native's: a tmpfs of their own,
// mounted on the run's directory in the run's mount namespace (memory:
// never the disk, the image store or the sandbox's writable layer), each
// file mode 0400 and owned by the command's user, the tmpfs then made
// read-only and bound read-only at sandbox.SecretFilesDir.

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

// secretMounts checks the sandbox's secrets, writes its trust store's
// files into the run's directory, mounts its secret files, and returns
// their mounts; the variables the sandbox's commands get (placeholders,
// trust variables, AGENTKERNEL_SECRETS_PATH) are set in p's environment
// and kept in r.secretEnv.
func (r *run) secretMounts(p *process) ([]specs.Mount, error) {
	s := r.spec.Secrets
	if !hasSecrets(r.spec) {
		return nil, nil
	}
	if r.keep != "" && len(s.Files) > 0 {
		return nil, errors.New("--secret-file is not supported for persistent sandboxes: bind the secret with -S KEY:HOST instead")
	}
	var env []string
	mounts, err := r.trustMounts(&env)
	if err != nil {
		return nil, err
	}
	if len(s.Files) > 0 {
		m, err := r.secretFilesMount(p.uid, p.gid)
		if err != nil {
			return nil, err
		}
		mounts = append(mounts, m)
		env = setEnv(env, "AGENTKERNEL_SECRETS_PATH", sandbox.SecretFilesDir)
	}
	r.secretEnv = env
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		p.env = setEnv(p.env, k, v)
	}
	return mounts, nil
}

// trustMounts are the mounts of the trust store of the sandbox's secret
// bindings (none without bindings); env gets the trust variables and the
// placeholders.
func (r *run) trustMounts(env *[]string) ([]specs.Mount, error) {
	s := r.spec.Secrets
	if len(s.Bindings) == 0 {
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
		*env = setEnv(*env, k, "/"+target)
	}
	for _, k := range s.Keys() {
		*env = setEnv(*env, k, sandbox.SecretPlaceholder)
	}
	return mounts, nil
}

// secretFilesMount writes the run's secret files (uid and gid: the
// command's user) on a tmpfs of their own mounted at <dir>/secrets in
// the run's mount namespace (the calling thread's, which runsc and its
// gofer inherit), then made read-only, and returns its read-only bind at
// sandbox.SecretFilesDir, a directory made inside the root.
func (r *run) secretFilesMount(uid, gid int) (specs.Mount, error) {
	files := r.spec.Secrets.Files
	dst := strings.TrimPrefix(sandbox.SecretFilesDir, "/")
	rootFd, err := unix.Open(r.rootfs(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return specs.Mount{}, err
	}
	defer unix.Close(rootFd)
	dfd, err := mkdirAllIn(rootFd, dst)
	if err != nil {
		return specs.Mount{}, fmt.Errorf("secret files: their directory %s cannot be made in the image: %w", sandbox.SecretFilesDir, err)
	}
	unix.Close(dfd)
	src := filepath.Join(r.dir, "secrets")
	if err := os.Mkdir(src, 0o700); err != nil {
		return specs.Mount{}, fmt.Errorf("secret files: %w", err)
	}
	size := int64(64 << 10)
	for _, f := range files {
		size += int64(len(f.Value)) + 4096 // a page per file at least
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	opts := fmt.Sprintf("mode=0500,size=%d,nr_inodes=%d,uid=%d,gid=%d", size, len(files)+8, uid, gid)
	if err := unix.Mount("tmpfs", src, "tmpfs", flags, opts); err != nil {
		return specs.Mount{}, fmt.Errorf("secret files: a tmpfs for them: %w", err)
	}
	sfd, err := unix.Open(src, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return specs.Mount{}, fmt.Errorf("secret files: %w", err)
	}
	defer unix.Close(sfd)
	for _, f := range files {
		if !native.SecretFileName(f.Key) {
			return specs.Mount{}, fmt.Errorf("--secret-file: %.130q is not a secret's name", f.Key)
		}
		if err := native.WriteSecretFile(sfd, f, uid, gid); err != nil {
			return specs.Mount{}, fmt.Errorf("secret files: %s: %w", f.Key, err)
		}
	}
	if err := unix.Mount("", src, "", unix.MS_REMOUNT|unix.MS_RDONLY|flags, ""); err != nil {
		return specs.Mount{}, fmt.Errorf("secret files: making them read-only: %w", err)
	}
	return specs.Mount{Destination: sandbox.SecretFilesDir, Type: "bind", Source: src, Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}}, nil
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

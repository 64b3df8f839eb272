package native

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Secret injection (run -S, sandbox create -S: sandbox.Secrets): the
// secrets' values and the CA's private key stay with the sandbox's owner
// (a run, or a persistent sandbox's supervisor) and its network helper
// (netproc.Config.Inject); the sandbox gets the CA's certificate in its
// trust store and, in each bound secret's variable, the placeholder (for
// a persistent sandbox, in the template of every exec).

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
	if s == nil || len(s.Bindings) == 0 && len(s.Files) == 0 {
		return nil
	}
	switch {
	case r.prepared:
		// A warm sandbox serves requests of any caller: a CA, placeholders
		// and secret files are a request's own.
		return errors.New("secret injection (-S/--secret, --secret-file) is not supported for pooled sandboxes")
	case r.persistent && len(s.Files) > 0:
		return errors.New("--secret-file is not supported for persistent sandboxes: bind the secret with -S KEY:HOST instead")
	}
	if len(s.Files) > 0 {
		for _, f := range s.Files {
			if !SecretFileName(f.Key) {
				return fmt.Errorf("--secret-file: %.130q is not a secret's name", f.Key)
			}
		}
		cfg.SecretFiles = s.Files
		cfg.Exec.Env = setEnv(cfg.Exec.Env, "AGENTKERNEL_SECRETS_PATH", sandbox.SecretFilesDir)
	}
	if len(s.Bindings) == 0 {
		return nil
	}
	switch {
	case !cfg.Network:
		return errors.New("secret injection (-S/--secret) needs network egress (--network filtered or full)")
	case len(s.CACert) == 0 || len(s.CAKey) == 0:
		return errors.New("secret injection: no CA for the sandbox")
	}
	cfg.TrustCA, cfg.TrustCAHash = s.CACert, s.CAHash
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
// alone at sandboxCA (where the root can take a new file), the variables
// that name a bundle pointing at it, and SSL_CERT_DIR naming a hashed
// directory with the CA and the image's own certificates (writeCertDir).
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
	return s.writeCertDir(ca)
}

// sandboxCertDir is the sandbox's SSL_CERT_DIR (on its /run tmpfs, which
// every root has, the host image's read-only /etc included).
const sandboxCertDir = "/run/agentkernel/certs"

// imageCertDirs are where images keep their hashed certificate
// directory, in the order they are looked for.
var imageCertDirs = []string{"/etc/ssl/certs", "/etc/pki/tls/certs"}

// maxCertDirEntries bounds the image's certificate directory taken in.
const maxCertDirEntries = 8192

// writeCertDir gives the sandbox an SSL_CERT_DIR for the programs that
// read a hashed directory only (OpenSSL's -CApath, SSL_CERT_DIR alone): a
// read-only directory at sandboxCertDir holding the CA ca as
// <subject hash>.N (the first N the image's directory does not use) and,
// for each entry of the image's certificate directory, a link to it by
// the same name. Nothing where the CA's hash is unknown.
func (s *initState) writeCertDir(ca []byte) error {
	h := s.cfg.TrustCAHash
	if len(h) != 8 || strings.Trim(h, "0123456789abcdef") != "" {
		return nil
	}
	src := filepath.Join(s.scratch, "certs")
	if err := os.Mkdir(src, 0o755); err != nil {
		return err
	}
	taken := map[string]bool{}
	for _, d := range imageCertDirs {
		dir, err := s.inRoot(d)
		if err != nil {
			continue
		}
		names, err := readDirNames(dir, maxCertDirEntries)
		if err != nil {
			continue
		}
		for _, name := range names {
			if err := os.Symlink(d+"/"+name, filepath.Join(src, name)); err != nil {
				return fmt.Errorf("the sandbox's certificate directory: %w", err)
			}
			taken[name] = true
		}
		break
	}
	n := 0
	for taken[h+"."+strconv.Itoa(n)] {
		n++
	}
	if err := os.WriteFile(filepath.Join(src, h+"."+strconv.Itoa(n)), ca, 0o644); err != nil {
		return err
	}
	parent, err := s.inRoot(filepath.Dir(sandboxCertDir))
	if err == nil {
		err = mkdirAllOwned(parent, s.cfg.RootUID, s.cfg.RootGID)
	}
	dst := ""
	if err == nil {
		dst, err = s.inRoot(sandboxCertDir)
	}
	if err == nil {
		err = os.MkdirAll(dst, 0o755)
	}
	if err == nil {
		err = bindMount(src, dst, true, false)
	}
	if err != nil {
		return fmt.Errorf("the sandbox's certificate directory at %s: %w", sandboxCertDir, err)
	}
	s.cfg.Exec.Env = setEnv(s.cfg.Exec.Env, "SSL_CERT_DIR", sandboxCertDir)
	return nil
}

// readDirNames lists the directory dir (not a link to one) without
// following anything, refusing one of more than max entries.
func readDirNames(dir string, max int) ([]string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	names, err := f.Readdirnames(max + 1)
	if err != nil && err != io.EOF {
		return nil, err
	}
	if len(names) > max {
		return nil, fmt.Errorf("more than %d entries", max)
	}
	return names, nil
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

// SecretFileName reports whether k can name a secret's file: the vault's
// rule for names ([A-Za-z0-9_-]{1,128}), so never a path, "." or "..".
// The gvisor backend checks its secret files with it too.
func SecretFileName(k string) bool {
	if k == "" || len(k) > 128 {
		return false
	}
	for _, c := range []byte(k) {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// writeSecretFiles gives the command its --secret-file files: a tmpfs of
// their own at sandbox.SecretFilesDir (memory only: never the disk, the
// writable layer or a snapshot of it), each file written there mode
// 0400 and owned by the command's user (uid, gid: ids as the init sees
// them), then the tmpfs made read-only. Runs once the user is resolved,
// before the pivot.
func (s *initState) writeSecretFiles(uid, gid int) error {
	files := s.cfg.SecretFiles
	if len(files) == 0 {
		return nil
	}
	parent, err := s.inRoot(filepath.Dir(sandbox.SecretFilesDir))
	if err != nil {
		return fmt.Errorf("secret files: %w", err)
	}
	if err := mkdirAllOwned(parent, s.cfg.RootUID, s.cfg.RootGID); err != nil {
		return fmt.Errorf("secret files: %w", err)
	}
	dir, err := s.inRoot(sandbox.SecretFilesDir)
	if err != nil {
		return fmt.Errorf("secret files: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("secret files: %w", err)
	}
	size := int64(64 << 10)
	for _, f := range files {
		size += int64(len(f.Value)) + 4096 // a page per file at least
	}
	opts := fmt.Sprintf("mode=0500,size=%d,nr_inodes=%d,uid=%d,gid=%d", size, len(files)+8, uid, gid)
	if err := mount("tmpfs", dir, "tmpfs", msTmp|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("secret files: a tmpfs at %s: %w", sandbox.SecretFilesDir, err)
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("secret files: %w", err)
	}
	defer unix.Close(dfd)
	for _, f := range files {
		if !SecretFileName(f.Key) {
			return fmt.Errorf("secret files: %.130q is not a secret's name", f.Key)
		}
		if err := WriteSecretFile(dfd, f, uid, gid); err != nil {
			return fmt.Errorf("secret files: %s: %w", f.Key, err)
		}
	}
	if err := mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY|msTmp|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("secret files: making %s read-only: %w", sandbox.SecretFilesDir, err)
	}
	return nil
}

// WriteSecretFile creates f (a name checked by SecretFileName) in the
// directory dfd, a fresh tmpfs: a new file, no link followed, mode 0400,
// owned by uid:gid. The gvisor backend writes its secret files with it
// too.
func WriteSecretFile(dfd int, f sandbox.SecretFile, uid, gid int) error {
	fd, err := unix.Openat(dfd, f.Key, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return err
	}
	file := os.NewFile(uintptr(fd), f.Key)
	defer file.Close()
	if _, err := file.Write(f.Value); err != nil {
		return err
	}
	if err := file.Chown(uid, gid); err != nil {
		return err
	}
	return file.Chmod(0o400)
}

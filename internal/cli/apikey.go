package cli

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentkernel/agentkernel/internal/config"
)

// keyFileName is the API key file under the data directory, made on the
// first start of a TCP server that was given no key.
const keyFileName = "api-key"

// maxKeyBytes bounds what is read from a key file or the key descriptor.
const maxKeyBytes = 64 << 10

// keySources are where the command line says keys come from.
type keySources struct {
	keys    []string // --api-key (visible in ps: warned)
	keyFile string   // --api-key-file
	keyFD   int      // --api-key-fd (hidden: 'daemon start' hands keys to the daemon); 0 none
}

// explicit reports whether the command line names keys.
func (k keySources) explicit() bool { return len(k.keys) > 0 || k.keyFile != "" || k.keyFD > 0 }

// apiKeys collects the keys by precedence: the key descriptor, then
// --api-key and --api-key-file, else $AGENTKERNEL_API_KEY, else [api]
// api_key_env / api_key. from names the source ("" when none).
func (a *App) apiKeys(ks keySources, cfg *config.Config) (keys []string, from string, err error) {
	if ks.keyFD > 0 {
		if ks.keyFD < 3 {
			return nil, "", fmt.Errorf("--api-key-fd %d: not a descriptor of its own (3 or more)", ks.keyFD)
		}
		f := os.NewFile(uintptr(ks.keyFD), "api-key-fd")
		if f == nil {
			return nil, "", fmt.Errorf("--api-key-fd %d: not an open descriptor", ks.keyFD)
		}
		defer f.Close()
		keys, err := parseKeys(f)
		if err != nil {
			return nil, "", fmt.Errorf("--api-key-fd %d: %w", ks.keyFD, err)
		}
		return keys, "the key descriptor", nil
	}
	for _, k := range ks.keys {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	if len(ks.keys) > 0 {
		a.Warnf("--api-key puts the key on the command line, where every user of this machine can read it (ps, /proc/PID/cmdline); use --api-key-file FILE or $AGENTKERNEL_API_KEY instead")
		from = "--api-key"
	}
	if ks.keyFile != "" {
		f, err := os.Open(ks.keyFile)
		if err != nil {
			return nil, "", fmt.Errorf("--api-key-file: %w", err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
			a.Warnf("--api-key-file %s can be read by other users (mode %04o): chmod 600 %s", ks.keyFile, fi.Mode().Perm(), ks.keyFile)
		}
		fk, err := parseKeys(f)
		if err != nil {
			return nil, "", fmt.Errorf("--api-key-file %s: %w", ks.keyFile, err)
		}
		if len(fk) == 0 {
			return nil, "", fmt.Errorf("--api-key-file %s holds no key", ks.keyFile)
		}
		keys, from = append(keys, fk...), "--api-key-file"
	}
	if len(keys) > 0 {
		return keys, from, nil
	}
	if k := strings.TrimSpace(os.Getenv("AGENTKERNEL_API_KEY")); k != "" {
		return []string{k}, "$AGENTKERNEL_API_KEY", nil
	}
	if cfg.API.APIKeyEnv != "" {
		if k := strings.TrimSpace(os.Getenv(cfg.API.APIKeyEnv)); k != "" {
			return []string{k}, "$" + cfg.API.APIKeyEnv + " ([api] api_key_env)", nil
		}
	}
	if k := strings.TrimSpace(cfg.API.APIKey); k != "" {
		return []string{k}, "[api] api_key", nil
	}
	return nil, "", nil
}

// parseKeys reads keys, one a line; blank lines and # comments are
// skipped.
func parseKeys(r io.Reader) ([]string, error) {
	var keys []string
	sc := bufio.NewScanner(io.LimitReader(r, maxKeyBytes))
	for sc.Scan() {
		if k := strings.TrimSpace(sc.Text()); k != "" && !strings.HasPrefix(k, "#") {
			keys = append(keys, k)
		}
	}
	return keys, sc.Err()
}

// dataDirKey returns the keys of <data-dir>/api-key, making the file
// with a new random key when there is none, and says on stderr where it
// is and how to hand it to the SDKs. The file must be a regular file of
// the caller's, readable by nobody else.
func (a *App) dataDirKey() ([]string, error) {
	path := filepath.Join(a.DataDir, keyFileName)
	keys, err := readKeyFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		keys, err = createKeyFile(a.DataDir, path)
		if err == nil {
			a.Infof("generated an API key for the HTTP API in %s (readable by you only)", path)
			a.Infof("clients send it as 'Authorization: Bearer <key>'; for the SDKs and pkg/client: export AGENTKERNEL_API_KEY=\"$(cat %s)\"", shellQuote(path))
			return keys, nil
		}
	}
	if err != nil {
		return nil, err
	}
	a.Infof("API key from %s (for the SDKs: export AGENTKERNEL_API_KEY=\"$(cat %s)\")", path, shellQuote(path))
	return keys, nil
}

// readKeyFile reads the key file, refusing one that others could have
// written or can read.
func readKeyFile(path string) ([]string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("API key file %s is a symbolic link: refusing it (remove it to have a new key made)", path)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("API key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("API key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("API key file %s is not a regular file: refusing it", path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("API key file %s belongs to uid %d, not to you (uid %d): refusing it", path, st.Uid, os.Geteuid())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("API key file %s can be read or written by other users (mode %04o): refusing it; 'chmod 600 %s' if you trust it, or remove it to have a new key made", path, perm, shellQuote(path))
	}
	keys, err := parseKeys(f)
	if err != nil {
		return nil, fmt.Errorf("API key file %s: %w", path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("API key file %s holds no key: remove it to have a new one made", path)
	}
	return keys, nil
}

// newAPIKey is 32 random bytes in a recognisable text form: "ak_" and
// URL-safe base64.
func newAPIKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return "ak_" + base64.RawURLEncoding.EncodeToString(b)
}

// createKeyFile writes a new key to path atomically: a 0600 temporary
// file in the same directory, synced, then linked into place (so a key
// file made meanwhile by another server start is kept and used).
func createKeyFile(dir, path string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("making the data directory for the API key: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".api-key-*")
	if err != nil {
		return nil, fmt.Errorf("writing the API key: %w", err)
	}
	defer os.Remove(tmp.Name())
	key := newAPIKey()
	_, err = tmp.WriteString(key + "\n")
	if err == nil {
		err = tmp.Chmod(0o600)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("writing the API key: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return readKeyFile(path)
		}
		return nil, fmt.Errorf("writing the API key: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return []string{key}, nil
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	safe := s != ""
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/._-+:,@%", c)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

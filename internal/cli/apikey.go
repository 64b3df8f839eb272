package cli

import (
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

// maxKeyBytes bounds a key file and what the key descriptor holds: more
// is refused, never cut short.
const maxKeyBytes = 64 << 10

// keySources are where the command line says keys come from.
type keySources struct {
	keys    []string // --api-key (visible in ps: warned)
	keyFile string   // --api-key-file
	keyFD   int      // --api-key-fd (hidden: 'daemon start' hands keys to the daemon); 0 none
}

// keyError is a key that cannot be read from where the user pointed: a
// usage error, naming the flag or variable, with a hint.
func keyError(hint, format string, args ...any) error {
	return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf(format, args...), Hint: hint}
}

// keyFileHint is the hint of a key file that cannot be used.
const keyFileHint = "--api-key-file names a regular file of at most 64 KiB holding the keys, one per line; or give the key in $AGENTKERNEL_API_KEY"

// apiKeys collects the keys by precedence: the key descriptor, then
// --api-key and --api-key-file, else $AGENTKERNEL_API_KEY, else [api]
// api_key_env / api_key of api (the settings trustedAPI let through).
// from names the source ("" when none). A source that is given but
// holds no key, or cannot be read, is an error (*ExitError), never "no
// key".
func (a *App) apiKeys(ks keySources, api config.API) (keys []string, from string, err error) {
	if ks.keyFD > 0 {
		const hint = "--api-key-fd is how 'agentkernel daemon start' hands the keys to the daemon; use --api-key-file or $AGENTKERNEL_API_KEY"
		if ks.keyFD < 3 {
			return nil, "", keyError(hint, "--api-key-fd %d: not a descriptor of its own (3 or more)", ks.keyFD)
		}
		f := os.NewFile(uintptr(ks.keyFD), "api-key-fd")
		if f == nil {
			return nil, "", keyError(hint, "--api-key-fd %d: not an open descriptor", ks.keyFD)
		}
		defer f.Close()
		keys, err := readKeys(f)
		if err != nil {
			return nil, "", keyError(hint, "--api-key-fd %d: %v", ks.keyFD, err)
		}
		if len(keys) == 0 {
			return nil, "", keyError(hint, "--api-key-fd %d holds no key", ks.keyFD)
		}
		return keys, "the key descriptor", nil
	}
	for _, k := range ks.keys {
		k = strings.TrimSpace(k)
		if k == "" {
			return nil, "", keyError("give the key itself, or leave --api-key out", "--api-key: the key is empty")
		}
		keys = append(keys, k)
	}
	if len(ks.keys) > 0 {
		a.Warnf("--api-key puts the key on the command line, where every user of this machine can read it (ps, /proc/PID/cmdline); use --api-key-file FILE or $AGENTKERNEL_API_KEY instead")
		from = "--api-key"
	}
	if ks.keyFile != "" {
		fk, perm, err := readKeyFileFlag(ks.keyFile)
		if err != nil {
			return nil, "", keyError(keyFileHint, "--api-key-file %s: %v", ks.keyFile, err)
		}
		if perm&0o077 != 0 {
			a.Warnf("--api-key-file %s can be read by other users (mode %04o): chmod 600 %s", ks.keyFile, perm, shellQuote(ks.keyFile))
		}
		keys, from = append(keys, fk...), "--api-key-file"
	}
	if len(keys) > 0 {
		return keys, from, nil
	}
	if k, ok := os.LookupEnv("AGENTKERNEL_API_KEY"); ok {
		if k = strings.TrimSpace(k); k == "" {
			return nil, "", keyError("export the key itself, or unset AGENTKERNEL_API_KEY to use another source", "$AGENTKERNEL_API_KEY is set but empty")
		}
		return []string{k}, "$AGENTKERNEL_API_KEY", nil
	}
	if name := api.APIKeyEnv; name != "" {
		k, ok := os.LookupEnv(name)
		if k = strings.TrimSpace(k); ok && k == "" {
			return nil, "", keyError("export the key in it, or unset "+name, "$%s ([api] api_key_env) is set but empty", name)
		}
		if ok {
			return []string{k}, "$" + name + " ([api] api_key_env)", nil
		}
		a.Warnf("[api] api_key_env names $%s, which is not set: looking for a key elsewhere", name)
	}
	if k := strings.TrimSpace(api.APIKey); k != "" {
		return []string{k}, "[api] api_key", nil
	}
	return nil, "", nil
}

// readKeyFileFlag reads the keys of --api-key-file: a regular file (a
// FIFO or a device could block start-up or never end), at most
// maxKeyBytes, holding at least one key. It returns the file's mode for
// the caller's warning.
func readKeyFileFlag(path string) ([]string, fs.FileMode, error) {
	// O_NONBLOCK: opening a FIFO does not wait for a writer; the type is
	// checked on the open file, so what was checked is what is read.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("not a regular file (%s): refusing it", fileKind(fi.Mode()))
	}
	keys, err := readKeys(f)
	if err != nil {
		return nil, 0, err
	}
	if len(keys) == 0 {
		return nil, 0, errors.New("holds no key")
	}
	return keys, fi.Mode().Perm(), nil
}

// fileKind names a file type for messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "not a plain file"
}

// readKeys reads keys, one a line; blank lines and # comments are
// skipped. More than maxKeyBytes is an error.
func readKeys(r io.Reader) ([]string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxKeyBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxKeyBytes {
		return nil, fmt.Errorf("more than %d KiB: refusing it (not a key file?)", maxKeyBytes>>10)
	}
	var keys []string
	for _, line := range strings.Split(string(b), "\n") {
		if k := strings.TrimSpace(line); k != "" && !strings.HasPrefix(k, "#") {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// dataDirKey returns the keys of <data-dir>/api-key, making the file
// with a new random key when there is none, and says on stderr where it
// is and how to hand it to the SDKs. The file must be a regular file of
// the caller's, readable by nobody else.
func (a *App) dataDirKey() ([]string, error) {
	if err := checkKeyDir(a.DataDir); err != nil {
		return nil, err
	}
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

// checkKeyDir refuses a data directory that another user could change:
// one that is not the caller's, or that group or others may write to
// (they could swap the key file for one whose key they know, or read a
// new one in the moment before its mode is set). A directory that does
// not exist yet is made, mode 0700, by createKeyFile.
func checkKeyDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("data directory for the API key: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("data directory %s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("data directory %s belongs to uid %d, not to you (uid %d): refusing to keep the API key there (give another --data-dir, or a key with --api-key-file or $AGENTKERNEL_API_KEY)", dir, st.Uid, os.Geteuid())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("data directory %s can be written by other users (mode %04o): refusing to keep the API key there ('chmod go-w %s', or give a key with --api-key-file or $AGENTKERNEL_API_KEY)", dir, perm, shellQuote(dir))
	}
	return nil
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
	keys, err := readKeys(f)
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

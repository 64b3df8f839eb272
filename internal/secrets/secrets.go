package secrets

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Backend names, as [secrets] backend spells them.
const (
	BackendFile    = "file"
	BackendEnv     = "env"
	BackendKeyring = "keyring"
)

// KeyEnv is the environment variable that may hold the file backend's
// identity (an AGE-SECRET-KEY-1… string) instead of the key file.
const KeyEnv = "AGENTKERNEL_SECRETS_KEY"

// Limits on names and values.
const (
	MaxKeyLen    = 128
	MaxValueSize = 64 << 10
)

// Vault is a store of named secret values.
type Vault interface {
	// Backend is the backend's name (file, env).
	Backend() string
	// Location says where the values live, for messages: the vault
	// file's path, or "host environment variables".
	Location() string
	// Set stores value under key, replacing any value it had.
	Set(key string, value []byte) error
	// Get returns key's value (a copy the caller may keep).
	Get(key string) ([]byte, error)
	// List returns the names stored, sorted; never values.
	List() ([]string, error)
	// Delete removes key; ErrNotFound when it is not there.
	Delete(key string) error
}

// Options says which vault Open returns.
type Options struct {
	// Backend is file (also when empty), env or keyring.
	Backend string
	// DataDir is agentkernel's data directory; the file backend keeps
	// its files in DataDir/secrets.
	DataDir string
	// LookupEnv reads the environment (KeyEnv, and the env backend's
	// values); nil is os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Now stamps set_at; nil is time.Now.
	Now func() time.Time
}

// Open returns the vault o describes. It reads and writes nothing: the
// file backend's files are checked when they are used, and made on the
// first Set.
func Open(o Options) (Vault, error) {
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	switch o.Backend {
	case "", BackendFile:
		if o.DataDir == "" {
			return nil, errors.New("secrets: no data directory for the file backend")
		}
		return newFileVault(filepath.Join(o.DataDir, "secrets"), o), nil
	case BackendEnv:
		return envVault{lookup: o.LookupEnv}, nil
	case BackendKeyring:
		return nil, &Error{Kind: ErrUnsupported, msg: `the 'keyring' secrets backend is not supported in this build of agentkernel: ` +
			`set [secrets] backend = "file" (the default: a vault encrypted with age) or "env" (read-only host environment variables)`}
	}
	return nil, &Error{Kind: ErrUnsupported, msg: fmt.Sprintf("unknown secrets backend %q: use file, env or keyring", o.Backend)}
}

// The kinds of failure; every error from this package that is one of
// them is an *Error whose Is matches its kind.
var (
	// ErrNotFound: no secret of that name.
	ErrNotFound = errors.New("secret not found")
	// ErrReadOnly: the backend does not store values (env).
	ErrReadOnly = errors.New("secrets backend is read-only")
	// ErrUnsupported: the backend is not in this build, or unknown.
	ErrUnsupported = errors.New("secrets backend not supported")
	// ErrInvalidKey: a name outside [A-Za-z0-9_-]{1,128}.
	ErrInvalidKey = errors.New("invalid secret name")
	// ErrInvalidValue: an empty value or one over MaxValueSize.
	ErrInvalidValue = errors.New("invalid secret value")
	// ErrWrongKey: the vault was encrypted to another identity.
	ErrWrongKey = errors.New("the vault cannot be decrypted with this key")
	// ErrBadKey: the identity cannot be read or is not an age X25519
	// identity (key file or KeyEnv), or the vault exists without it.
	ErrBadKey = errors.New("the vault key cannot be used")
	// ErrCorrupt: the vault is not an age file holding our document.
	ErrCorrupt = errors.New("the vault is damaged")
	// ErrInsecure: a file or directory that others could read or
	// replace, or that is not the user's own.
	ErrInsecure = errors.New("unsafe permissions on a secrets file")
)

// Error is a failure of one of the kinds above.
type Error struct {
	// Kind is one of the Err* values.
	Kind error
	// Key is the secret concerned, where one is.
	Key string
	// Path is the file concerned, where one is.
	Path string

	msg string
	err error
}

func (e *Error) Error() string { return e.msg }

// Is matches e's kind.
func (e *Error) Is(target error) bool { return target == e.Kind }

// Unwrap is the underlying error, where there is one.
func (e *Error) Unwrap() error { return e.err }

func notFound(key string) error {
	return &Error{Kind: ErrNotFound, Key: key, msg: fmt.Sprintf("Secret '%s' not found", key)}
}

// CheckKey says whether key is a valid secret name: 1 to MaxKeyLen
// characters of [A-Za-z0-9_-].
func CheckKey(key string) error {
	bad := func(why string) error {
		return &Error{Kind: ErrInvalidKey, Key: key, msg: fmt.Sprintf("invalid secret name %q: %s", key, why)}
	}
	if key == "" {
		return bad("it is empty")
	}
	if len(key) > MaxKeyLen {
		return &Error{Kind: ErrInvalidKey, Key: key, msg: fmt.Sprintf("invalid secret name %.40q…: longer than %d characters", key, MaxKeyLen)}
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return bad("names may hold only letters A-Z and a-z, digits, '_' and '-'")
		}
	}
	return nil
}

// checkValue refuses an empty value or one over MaxValueSize.
func checkValue(key string, v []byte) error {
	switch {
	case len(v) == 0:
		return &Error{Kind: ErrInvalidValue, Key: key, msg: fmt.Sprintf("the value of secret '%s' is empty", key)}
	case len(v) > MaxValueSize:
		return &Error{Kind: ErrInvalidValue, Key: key, msg: fmt.Sprintf("the value of secret '%s' is %d bytes, over the limit of %d (64 KiB)", key, len(v), MaxValueSize)}
	}
	return nil
}

// envVault reads host environment variables and stores nothing.
type envVault struct {
	lookup func(string) (string, bool)
}

func (envVault) Backend() string  { return BackendEnv }
func (envVault) Location() string { return "host environment variables" }

func readOnly(op, key string) error {
	return &Error{Kind: ErrReadOnly, Key: key, msg: fmt.Sprintf("Cannot %s secrets with 'env' backend: it only reads the host's environment variables; "+
		"set or unset the variable in your shell, or use [secrets] backend = \"file\" to store secrets", op)}
}

func (envVault) Set(key string, _ []byte) error { return readOnly("set", key) }
func (envVault) Delete(key string) error        { return readOnly("delete", key) }

// List is empty: the environment is not a list of secrets.
func (envVault) List() ([]string, error) { return []string{}, nil }

func (v envVault) Get(key string) ([]byte, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	s, ok := v.lookup(key)
	if !ok || s == "" {
		return nil, notFound(key)
	}
	return []byte(s), nil
}

package secrets

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/agentkernel/agentkernel/internal/atomicfile"
)

// docVersion is the version of the plaintext document this build writes
// and reads.
const docVersion = 1

// maxVaultSize bounds what is read of a vault or key file, so that a
// hostile file cannot make a command allocate without limit.
const (
	maxVaultSize = 64 << 20
	maxKeyFile   = 64 << 10
)

// document is the vault's plaintext: JSON, values base64 (encoding/json's
// []byte), maps written with sorted keys.
type document struct {
	Version  int                 `json:"version"`
	Secrets  map[string][]byte   `json:"secrets"`
	Metadata map[string]metadata `json:"metadata"`
}

// metadata is what is known of a value besides itself.
type metadata struct {
	SetAt   string `json:"set_at"` // RFC 3339, UTC
	Backend string `json:"backend"`
}

// fileVault is the file backend: DIR/vault.age encrypted to the identity
// in DIR/key or KeyEnv, changed under a flock on DIR/lock.
type fileVault struct {
	dir                          string
	vaultPath, keyPath, lockPath string
	lookup                       func(string) (string, bool)
	now                          func() time.Time
}

func newFileVault(dir string, o Options) *fileVault {
	return &fileVault{
		dir:       dir,
		vaultPath: filepath.Join(dir, "vault.age"),
		keyPath:   filepath.Join(dir, "key"),
		lockPath:  filepath.Join(dir, "lock"),
		lookup:    o.LookupEnv,
		now:       o.Now,
	}
}

func (v *fileVault) Backend() string  { return BackendFile }
func (v *fileVault) Location() string { return v.vaultPath }

func (v *fileVault) Get(key string) ([]byte, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	d, err := v.read()
	if err != nil {
		return nil, err
	}
	val, ok := d.Secrets[key]
	if !ok {
		return nil, notFound(key)
	}
	return bytes.Clone(val), nil
}

func (v *fileVault) List() ([]string, error) {
	d, err := v.read()
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(d.Secrets))
	for k := range d.Secrets {
		names = append(names, k)
	}
	slices.Sort(names)
	return names, nil
}

func (v *fileVault) Set(key string, value []byte) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := checkValue(key, value); err != nil {
		return err
	}
	return v.change(true, func(d *document) error {
		d.Secrets[key] = bytes.Clone(value)
		d.Metadata[key] = metadata{SetAt: v.now().UTC().Format(time.RFC3339), Backend: BackendFile}
		return nil
	})
}

func (v *fileVault) Delete(key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	return v.change(false, func(d *document) error {
		if _, ok := d.Secrets[key]; !ok {
			return notFound(key)
		}
		delete(d.Secrets, key)
		delete(d.Metadata, key)
		return nil
	})
}

// read decrypts the vault without taking the lock (a rename replaces it
// whole). No secrets directory or no vault file is an empty vault.
func (v *fileVault) read() (*document, error) {
	if err := checkDir(v.dir, false); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return emptyDoc(), nil
		}
		return nil, err
	}
	ct, err := readPrivate(v.vaultPath, "vault", maxVaultSize, ErrCorrupt)
	if errors.Is(err, fs.ErrNotExist) {
		return emptyDoc(), nil
	}
	if err != nil {
		return nil, err
	}
	id, from, err := v.identity(false)
	if err != nil {
		return nil, err
	}
	return v.decrypt(ct, id, from)
}

// change runs edit on the vault's document under the lock and writes the
// result back. create says whether a missing directory, key and vault
// are made (a set) or mean there is nothing to change (a delete).
func (v *fileVault) change(create bool, edit func(*document) error) error {
	if err := checkDir(v.dir, create); err != nil {
		if !create && errors.Is(err, fs.ErrNotExist) {
			return edit(emptyDoc())
		}
		return err
	}
	unlock, err := lockFile(v.lockPath)
	if err != nil {
		return err
	}
	defer unlock()

	ct, err := readPrivate(v.vaultPath, "vault", maxVaultSize, ErrCorrupt)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if !exists && !create {
		return edit(emptyDoc())
	}
	// A key is made only for a vault that does not exist yet: a vault
	// whose key file is gone must not be replaced by one under a new key.
	id, from, err := v.identity(create && !exists)
	if err != nil {
		return err
	}
	d := emptyDoc()
	if exists {
		if d, err = v.decrypt(ct, id, from); err != nil {
			return err
		}
	}
	if err := edit(d); err != nil {
		return err
	}
	out, err := v.encrypt(d, id.Recipient())
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(v.vaultPath, out, 0o600); err != nil {
		return fmt.Errorf("writing the secrets vault %s: %w", v.vaultPath, err)
	}
	return nil
}

func emptyDoc() *document {
	return &document{Version: docVersion, Secrets: map[string][]byte{}, Metadata: map[string]metadata{}}
}

// identity is the vault's identity: KeyEnv when set (no file touched),
// else the key file, made when create and it does not exist. from names
// where it came from, for messages.
func (v *fileVault) identity(create bool) (id *age.X25519Identity, from string, err error) {
	if s, ok := v.lookup(KeyEnv); ok && strings.TrimSpace(s) != "" {
		from = "$" + KeyEnv
		id, err = parseIdentity(s, from)
		return id, from, err
	}
	from = v.keyPath
	b, err := readPrivate(v.keyPath, "key file", maxKeyFile, ErrBadKey)
	switch {
	case err == nil:
		id, err = parseIdentity(string(b), from)
		return id, from, err
	case !errors.Is(err, fs.ErrNotExist):
		return nil, from, err
	case !create:
		return nil, from, &Error{Kind: ErrBadKey, Path: v.keyPath, err: err, msg: fmt.Sprintf(
			"the secrets vault %s exists but its key file %s does not: restore the key file, or set %s to the key the vault was made with",
			v.vaultPath, v.keyPath, KeyEnv)}
	}
	id, err = age.GenerateX25519Identity()
	if err != nil {
		return nil, from, fmt.Errorf("making the secrets vault key: %w", err)
	}
	content := fmt.Sprintf("# agentkernel secrets vault key (an age X25519 identity): it decrypts %s.\n"+
		"# Keep it private; anyone with this file and the vault reads every secret.\n"+
		"# created: %s\n# public key: %s\n%s\n",
		v.vaultPath, v.now().UTC().Format(time.RFC3339), id.Recipient(), id)
	if err := atomicfile.WriteFile(v.keyPath, []byte(content), 0o600); err != nil {
		return nil, from, fmt.Errorf("writing the secrets vault key %s: %w", v.keyPath, err)
	}
	return id, from, nil
}

// parseIdentity reads one AGE-SECRET-KEY-1… line from s (lines starting
// with '#' and blank lines ignored). The key itself never appears in an
// error.
func parseIdentity(s, from string) (*age.X25519Identity, error) {
	bad := func(why string) error {
		return &Error{Kind: ErrBadKey, Path: from, msg: fmt.Sprintf("the secrets vault key in %s cannot be used: %s", from, why)}
	}
	var line string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if line != "" {
			return nil, bad("it holds more than one key line")
		}
		line = l
	}
	if line == "" {
		return nil, bad("it holds no key (want one AGE-SECRET-KEY-1… line)")
	}
	if !strings.HasPrefix(strings.ToUpper(line), "AGE-SECRET-KEY-1") {
		return nil, bad("it is not an age X25519 identity (want AGE-SECRET-KEY-1…)")
	}
	id, err := age.ParseX25519Identity(line)
	if err != nil {
		return nil, bad("it is not a well-formed age X25519 identity (AGE-SECRET-KEY-1…)")
	}
	return id, nil
}

// decrypt opens ct with id (from says where id came from).
func (v *fileVault) decrypt(ct []byte, id *age.X25519Identity, from string) (*document, error) {
	corrupt := func(why string, err error) error {
		return &Error{Kind: ErrCorrupt, Path: v.vaultPath, err: err, msg: fmt.Sprintf(
			"the secrets vault %s is damaged (%s): restore it from a backup, or move it aside to start a new vault", v.vaultPath, why)}
	}
	r, err := age.Decrypt(bytes.NewReader(ct), id)
	if err != nil {
		var nomatch *age.NoIdentityMatchError
		if errors.As(err, &nomatch) {
			return nil, &Error{Kind: ErrWrongKey, Path: v.vaultPath, msg: fmt.Sprintf(
				"the vault cannot be decrypted with this key (from %s): %s was encrypted to another key; use the key it was made with (the key file, or %s), or move the vault aside to start a new one",
				from, v.vaultPath, KeyEnv)}
		}
		return nil, corrupt("not an age-encrypted file", err)
	}
	pt, err := io.ReadAll(io.LimitReader(r, maxVaultSize+1))
	if err != nil {
		return nil, corrupt("its encrypted content does not authenticate", err)
	}
	if len(pt) > maxVaultSize {
		return nil, corrupt("larger than any vault agentkernel writes", nil)
	}
	d := &document{}
	if err := json.Unmarshal(pt, d); err != nil {
		return nil, corrupt("its content is not the vault's JSON document", err)
	}
	if d.Version != docVersion {
		return nil, &Error{Kind: ErrCorrupt, Path: v.vaultPath, msg: fmt.Sprintf(
			"the secrets vault %s is of version %d, which this agentkernel does not read (it reads version %d)", v.vaultPath, d.Version, docVersion)}
	}
	if d.Secrets == nil {
		d.Secrets = map[string][]byte{}
	}
	if d.Metadata == nil {
		d.Metadata = map[string]metadata{}
	}
	for k := range d.Secrets {
		if CheckKey(k) != nil {
			return nil, corrupt(fmt.Sprintf("it holds an invalid name %.40q", k), nil)
		}
	}
	for k := range d.Metadata {
		if _, ok := d.Secrets[k]; !ok {
			delete(d.Metadata, k)
		}
	}
	return d, nil
}

func (v *fileVault) encrypt(d *document, to age.Recipient) ([]byte, error) {
	pt, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encoding the secrets vault: %w", err)
	}
	var out bytes.Buffer
	w, err := age.Encrypt(&out, to)
	if err != nil {
		return nil, fmt.Errorf("encrypting the secrets vault: %w", err)
	}
	if _, err := w.Write(pt); err != nil {
		return nil, fmt.Errorf("encrypting the secrets vault: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encrypting the secrets vault: %w", err)
	}
	clear(pt)
	return out.Bytes(), nil
}

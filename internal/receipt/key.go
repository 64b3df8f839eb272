package receipt

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentkernel/agentkernel/internal/privatefile"
)

// KeyFile is the signing key's name in its directory.
const KeyFile = "ed25519_signing_key.pkcs8"

// KeyDir is the signing key's directory under home.
func KeyDir(home string) string { return filepath.Join(home, ".agentkernel", "receipts") }

// maxKeyFile bounds what is read of a key file.
const maxKeyFile = 4096

// LoadOrCreateKey is the receipt signing key under home (KeyDir): read,
// or made on first use (PKCS#8 v2 DER, 0600, in a 0700 directory). The
// directory and the file must be the user's and private to them; neither
// is followed through a symbolic link.
func LoadOrCreateKey(home string) (ed25519.PrivateKey, error) {
	if home == "" {
		return nil, errors.New("receipt signing key: no home directory (HOME is not set)")
	}
	dir := KeyDir(home)
	if err := privatefile.Dir(dir, "receipt key directory", true); err != nil {
		return nil, fmt.Errorf("receipt signing key: %w", err)
	}
	path := filepath.Join(dir, KeyFile)
	key, err := readKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := createKey(dir, path); err != nil {
		return nil, err
	}
	return readKey(path)
}

// readKey reads and checks the key file at path (privatefile.Read).
func readKey(path string) (ed25519.PrivateKey, error) {
	der, err := privatefile.Read(path, "receipt signing key", maxKeyFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("receipt signing key: %w", err)
	}
	key, err := ParseKey(der)
	if err != nil {
		return nil, fmt.Errorf("receipt signing key: invalid Ed25519 signing key at %s: %w", path, err)
	}
	return key, nil
}

// ParseKey reads a PKCS#8 Ed25519 private key (v1, or v2 with its public
// key, which must match).
func ParseKey(der []byte) (ed25519.PrivateKey, error) {
	if len(der) > maxKeyFile {
		return nil, errors.New("too large")
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, err
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an Ed25519 key", k)
	}
	// A v2 key ends with its public key: [1] BIT STRING (0 unused bits).
	pub := key.Public().(ed25519.PublicKey)
	if len(der) == len(v2Prefix)+ed25519.SeedSize+len(v2Middle)+ed25519.PublicKeySize && bytes.HasPrefix(der, v2Prefix) {
		if got := der[len(der)-ed25519.PublicKeySize:]; !bytes.Equal(got, pub) {
			return nil, errors.New("its public key does not match its private key")
		}
	}
	return key, nil
}

// The DER of a PKCS#8 v2 (RFC 5958 OneAsymmetricKey) Ed25519 key:
// v2Prefix, the 32-byte seed, v2Middle, the 32-byte public key.
var (
	v2Prefix = []byte{0x30, 0x53, 0x02, 0x01, 0x01, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20}
	v2Middle = []byte{0xa1, 0x23, 0x03, 0x21, 0x00}
)

// MarshalKey writes key as PKCS#8 v2 DER.
func MarshalKey(key ed25519.PrivateKey) []byte {
	der := append([]byte{}, v2Prefix...)
	der = append(der, key.Seed()...)
	der = append(der, v2Middle...)
	return append(der, key.Public().(ed25519.PublicKey)...)
}

// createKey writes a new key to path, unless another process made one
// meanwhile (then that one is used).
func createKey(dir, path string) error {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("receipt signing key: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".key-*")
	if err != nil {
		return fmt.Errorf("receipt signing key: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(MarshalKey(key))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("receipt signing key: %w", err)
	}
	// link(2) never replaces: the first key made stays.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("receipt signing key: %w", err)
	}
	return nil
}

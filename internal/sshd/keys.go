package sshd

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/agentkernel/agentkernel/internal/atomicfile"
	"github.com/agentkernel/agentkernel/internal/privatefile"
)

const (
	// DefaultUser is the user a sandbox's SSH certificates name and
	// clients log in as, unless the sandbox was created with another.
	DefaultUser = "sandbox"
	// KeyID is the key id of every client certificate.
	KeyID = "agentkernel-client"
	// CertTTL is how long a client certificate is valid.
	CertTTL = 30 * time.Minute
	// clockSkew backdates a certificate's start, for clocks a little
	// apart.
	clockSkew = time.Minute
)

// Files in a sandbox's ssh directory.
const (
	caKeyFile    = "ca_ed25519"
	hostKeyFile  = "host_ed25519"
	knownHosts   = "known_hosts"
	portFile     = "port"
	ClientKey    = "client_ed25519"
	maxKeyFile   = 16 << 10
	dirWhat      = "sandbox's SSH directory"
	keyWhat      = "sandbox's SSH key"
	aliasPrefix  = "agentkernel-"
	certSuffix   = "-cert.pub"
	pubKeySuffix = ".pub"
)

// Dir is the SSH directory of the sandbox whose directory is sandboxDir.
func Dir(sandboxDir string) string { return filepath.Join(sandboxDir, "ssh") }

// HostAlias is the name the client knows the sandbox name's host key by
// (HostKeyAlias), whatever port it listens on.
func HostAlias(name string) string { return aliasPrefix + name }

// KnownHostsPath is the known_hosts file that pins the sandbox's host key.
func KnownHostsPath(dir string) string { return filepath.Join(dir, knownHosts) }

// Ensure makes dir (0700) with the sandbox's CA and host key when they
// are missing, and writes the known_hosts line pinning the host key
// under HostAlias(name). Existing keys are kept: a sandbox keeps its
// CA and host key from one start to the next.
func Ensure(dir, name string) error {
	if err := privatefile.Dir(dir, dirWhat, true); err != nil {
		return err
	}
	for _, f := range []string{caKeyFile, hostKeyFile} {
		p := filepath.Join(dir, f)
		if _, err := os.Lstat(p); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := newKey(p, f); err != nil {
			return err
		}
	}
	host, err := HostSigner(dir)
	if err != nil {
		return err
	}
	line := HostAlias(name) + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(host.PublicKey()))) + "\n"
	return atomicfile.WriteFile(KnownHostsPath(dir), []byte(line), 0o600)
}

// newKey writes a new ed25519 private key (OpenSSH format, 0600) to p.
func newKey(p, comment string) error {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	blk, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(p, pem.EncodeToMemory(blk), 0o600)
}

// signer reads the private key file p (private to the user, never
// through a link).
func signer(p string) (ssh.Signer, error) {
	b, err := privatefile.Read(p, keyWhat, maxKeyFile)
	if err != nil {
		return nil, err
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return s, nil
}

// CASigner is the sandbox's certificate authority.
func CASigner(dir string) (ssh.Signer, error) { return signer(filepath.Join(dir, caKeyFile)) }

// HostSigner is the sandbox's host key.
func HostSigner(dir string) (ssh.Signer, error) { return signer(filepath.Join(dir, hostKeyFile)) }

// SignUserCert signs pub as a user certificate for principal, valid from
// after to before, with OpenSSH's usual permissions (pty, port, agent
// and X11 forwarding, user rc; the server grants only what it serves).
func SignUserCert(ca ssh.Signer, pub ssh.PublicKey, principal string, after, before time.Time) (*ssh.Certificate, error) {
	var serial [8]byte
	if _, err := rand.Read(serial[:]); err != nil {
		return nil, err
	}
	var s uint64
	for _, b := range serial {
		s = s<<8 | uint64(b)
	}
	cert := &ssh.Certificate{
		Key:             pub,
		Serial:          s,
		CertType:        ssh.UserCert,
		KeyId:           KeyID,
		ValidPrincipals: []string{principal},
		ValidAfter:      uint64(after.Unix()),
		ValidBefore:     uint64(before.Unix()),
		Permissions: ssh.Permissions{Extensions: map[string]string{
			"permit-X11-forwarding":   "",
			"permit-agent-forwarding": "",
			"permit-port-forwarding":  "",
			"permit-pty":              "",
			"permit-user-rc":          "",
		}},
	}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		return nil, err
	}
	return cert, nil
}

// IssueClientKey makes a new client key at keyPath (0600) and its
// certificate at keyPath+"-cert.pub", signed by the CA in dir for
// principal and valid for ttl from now. It returns the certificate's
// fingerprint (SHA256:…).
func IssueClientKey(dir, keyPath, principal string, ttl time.Duration) (string, error) {
	ca, err := CASigner(dir)
	if err != nil {
		return "", err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	spub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return "", err
	}
	now := time.Now()
	cert, err := SignUserCert(ca, spub, principal, now.Add(-clockSkew), now.Add(ttl))
	if err != nil {
		return "", err
	}
	blk, err := ssh.MarshalPrivateKey(priv, KeyID)
	if err != nil {
		return "", err
	}
	if err := atomicfile.WriteFile(keyPath, pem.EncodeToMemory(blk), 0o600); err != nil {
		return "", err
	}
	if err := atomicfile.WriteFile(keyPath+certSuffix, ssh.MarshalAuthorizedKey(cert), 0o600); err != nil {
		return "", err
	}
	return ssh.FingerprintSHA256(cert), nil
}

// RemoveClientKey removes a client key and its certificate.
func RemoveClientKey(keyPath string) {
	_ = os.Remove(keyPath)
	_ = os.Remove(keyPath + certSuffix)
}

// CertPath is the certificate of the client key at keyPath.
func CertPath(keyPath string) string { return keyPath + certSuffix }

// WritePort records the port the sandbox's SSH server listens on.
func WritePort(dir string, port int) error {
	return atomicfile.WriteFile(filepath.Join(dir, portFile), []byte(strconv.Itoa(port)+"\n"), 0o600)
}

// Port is the port last recorded by WritePort (fs.ErrNotExist when none).
func Port(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, portFile))
	if err != nil {
		return 0, err
	}
	p, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil || p <= 0 || p > 65535 {
		return 0, fmt.Errorf("%s: not a port number", filepath.Join(dir, portFile))
	}
	return p, nil
}

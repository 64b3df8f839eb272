package sandbox

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/internal/audit"
)

// SecretPlaceholder is what a bound secret's variable holds inside a
// sandbox: the real value stays on the host and is added to the requests
// for its host by the sandbox's network helper.
const SecretPlaceholder = "ak-proxy-managed"

// ActionSecretInjected is the audit log's entry for a secret added to a
// sandbox's requests (names only, never the value).
const ActionSecretInjected = "secret_injected"

// Secrets are the secrets a sandbox's egress stack adds to its requests
// (run -S/--secret), and the per-sandbox CA its bound hosts' certificates
// are minted from. They are never serialized: Spec.Secrets is json:"-", so
// that no dry run, state file or log carries a value or the CA's key; they
// go from the command line to the sandbox's owner in memory, and from the
// owner to its network helper over the helper's socket.
type Secrets struct {
	// Bindings are the secrets and their hosts.
	Bindings []SecretBinding
	// CACert is the sandbox's CA certificate (PEM): it goes into the
	// sandbox's trust store.
	CACert []byte
	// CAKey is the CA's private key (PEM, PKCS #8): it stays on the host,
	// with the network helper.
	CAKey []byte
	// CAHash is OpenSSL's subject hash of the CA (8 hex digits,
	// netpolicy.SubjectHash): its file's name in the sandbox's
	// SSL_CERT_DIR. "": the sandbox gets no SSL_CERT_DIR.
	CAHash string
	// Files are the secrets written to files inside the sandbox (run
	// --secret-file), in SecretFilesDir: these values do enter it.
	Files []SecretFile
}

// SecretFilesDir is where a sandbox finds its secret files, one per key,
// on a read-only tmpfs of their own; AGENTKERNEL_SECRETS_PATH names it.
const SecretFilesDir = "/run/agentkernel/secrets"

// SecretFile is one secret written to SecretFilesDir/Key, mode 0400,
// owned by the command's user: its value, or with --placeholder-secrets
// SecretPlaceholder (a binding of Key puts the value in its requests).
type SecretFile struct {
	Key   string
	Value []byte
}

// SecretBindings are what a persistent sandbox keeps of its secret
// bindings (Spec.SecretBindings, in its record, its spec.json and the
// snapshots taken of it): which vault key goes to which host, in which
// header, and which vault holds the keys. No value and no key material:
// the sandbox's supervisor looks the values up in the vault at each
// start (so a key deleted meanwhile fails that start, named), and its CA
// lives in the sandbox's directory on the host (SecretCAFile).
type SecretBindings struct {
	// Backend is the vault ([secrets] backend: file, env) the keys are
	// read from; "" is the default, file.
	Backend string `json:"backend,omitempty"`
	// Bindings are the keys and their hosts, in order.
	Bindings []SecretRef `json:"bindings"`
}

// SecretRef is one recorded binding: a vault key for a host.
type SecretRef struct {
	Key  string `json:"key"`
	Host string `json:"host"`
	// Header is the header the value goes in as it is; "" is
	// "Authorization: Bearer <value>".
	Header string `json:"header,omitempty"`
}

// SecretCAFile is the name, in a persistent sandbox's directory on the
// host (never in anything the sandbox mounts, nor in a snapshot's
// layers), of the file that holds its secret injection CA: certificate
// and private key, mode 0600. It is made at the sandbox's first start
// with secrets and kept, so the CA (and the trust store made from it at
// each start) stays the same across restarts; a sandbox restored from a
// snapshot is another sandbox and makes its own.
const SecretCAFile = "secret-ca.pem"

// SecretBinding is one secret for one host.
type SecretBinding struct {
	// Key is the secret's name; inside the sandbox the variable of that
	// name holds SecretPlaceholder.
	Key string
	// Host is the exact host name the secret is added for (port 443).
	Host string
	// Header is the header the value goes in as it is; "" is
	// "Authorization: Bearer <value>".
	Header string
	// Value is the secret.
	Value []byte
}

// Keys are the bound secrets' names, each once, in order.
func (s *Secrets) Keys() []string {
	if s == nil {
		return nil
	}
	var keys []string
	seen := map[string]bool{}
	for _, b := range s.Bindings {
		if !seen[b.Key] {
			seen[b.Key] = true
			keys = append(keys, b.Key)
		}
	}
	return keys
}

// SecretInjection counts the requests a secret was added to for a host.
type SecretInjection struct {
	Key   string `json:"key"`
	Host  string `json:"host"`
	Count int    `json:"count"`
}

// AuditInjections records which secrets a run's network helper added to
// which hosts' requests, one entry per secret and host (names and counts,
// never values).
func (m *Manager) AuditInjections(spec *Spec, is []SecretInjection, start time.Time) {
	name := spec.Name
	if name == "" {
		name = "ephemeral"
	}
	for _, i := range is {
		m.audit(audit.Entry{Sandbox: name, Action: ActionSecretInjected, Command: spec.Args,
			Details: fmt.Sprintf("secret %s for %s (%d×)", i.Key, strings.ToLower(i.Host), max(i.Count, 1))}, start, nil)
	}
}

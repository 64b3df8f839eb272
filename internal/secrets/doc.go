// Package secrets is agentkernel's secret vault: named values (API keys,
// tokens) kept on the host so that a later step can hand them to the
// egress stack without ever putting them inside a sandbox. A Vault sets,
// gets, lists and deletes them; Open picks its backend from
// [secrets] backend in the configuration:
//
//   - file (the default): one age-encrypted file,
//     <data dir>/secrets/vault.age, holding a JSON document of values and
//     metadata (when each was set, by which backend). It is encrypted to
//     an X25519 identity kept beside it in <data dir>/secrets/key, made
//     on the first Set, or taken from AGENTKERNEL_SECRETS_KEY (an
//     AGE-SECRET-KEY-1… string), in which case no key file is read or
//     written. The secrets directory is 0700 and every file in it 0600.
//   - env: read-only lookup of the host's environment variables.
//   - keyring: the OS keychain, which this build does not carry; Open
//     says so.
//
// # Why age
//
// Upstream agentkernel's "vault" is a JSON file of base64 values, which
// anything that can read the file (a backup, a synced home directory, a
// process of another tool running as the user) reads in clear.
// filippo.io/age is a small, audited format with one well-reviewed Go
// implementation, no cgo, and a key format users can handle with the age
// command-line tool (age -d -i <data dir>/secrets/key vault.age prints the
// document). The alternative, golang.org/x/crypto's chacha20poly1305
// under a key of our own, would mean inventing a file format, a key
// encoding and nonce handling that age already gets right. Encrypting to
// an identity (rather than a passphrase) keeps set and get
// non-interactive, which is what agents and scripts need; the key file is
// protected by the same file permissions as an SSH private key, and
// keeping the key elsewhere (AGENTKERNEL_SECRETS_KEY, from a password
// manager or a CI secret store) makes the vault file alone worthless.
//
// # One encrypted document, rewritten whole
//
// The vault holds a handful of small values (at most 64 KiB each), so
// every change decrypts the document, changes it and writes it back
// encrypted with a fresh file key, through internal/atomicfile (a synced
// temporary file renamed over the old one): a reader sees the old vault
// or the new, and a crash leaves one of the two. A change holds an
// exclusive flock on <data dir>/secrets/lock from the read to the rename,
// so two concurrent sets (two processes or two goroutines with their own
// Vault) never lose one; readers take no lock, the rename makes that
// safe. The names are inside the encrypted document too: the file on
// disk says nothing but its size.
//
// # Hostile files
//
// Every file is opened without following symbolic links and checked on
// its descriptor: a regular file, owned by the effective user, with no
// permission bits for group or others (the directory likewise); anything
// else is refused with the chmod or chown that fixes it, never used. A
// key that does not open the vault (ErrWrongKey), a key that is not an
// age identity (ErrBadKey) and a vault that is not a well-formed age file
// of our document (ErrCorrupt) are errors that name the file concerned
// and change nothing: a set never replaces a vault it could not read.
// Error messages never contain a secret value or key material.
package secrets

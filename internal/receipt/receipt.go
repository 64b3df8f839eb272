// Package receipt is agentkernel's signed execution receipts: what ran
// (a run's or an exec's invocation), how it ended and a hash of its
// output, in upstream's format (version 1), signed with Ed25519.
//
// A receipt's payload is the compact JSON of its version, receipt_id,
// recorded_at, invocation and outcome, in that order and in the nested
// order of the format, null for an absent optional, strings escaped as
// serde_json escapes them (only '"', '\\' and control characters; <, >,
// & and non-ASCII characters are written as they are, in UTF-8). The
// payload's bytes are written by this package's own encoder (payload.go),
// never by encoding/json, so that receipts made here verify with
// upstream's tool and upstream's verify here: payload_hash_sha256 is the
// lowercase hex SHA-256 of those bytes and the signature is over them.
// Verify re-encodes the payload from the receipt's parsed fields, as
// upstream does.
//
// The signing key is <home>/.agentkernel/receipts/ed25519_signing_key.pkcs8
// (key.go), PKCS#8 v2 DER (the private key and its public key, the form
// upstream's ring writes and reads), made on first use.
package receipt

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Version is the receipt format's version.
const Version = 1

// Modes of an invocation.
const (
	ModeRun  = "run"
	ModeExec = "exec"
)

// Receipt is one execution receipt.
type Receipt struct {
	Version           uint32
	ReceiptID         string
	RecordedAt        string
	Invocation        Invocation
	Outcome           Outcome
	PayloadHashSHA256 string
	// Signature is nil for an unsigned receipt.
	Signature *Signature
}

// Invocation is what ran: Run for mode "run", Exec for mode "exec".
type Invocation struct {
	Mode string
	Run  *Run
	Exec *Exec
}

// Run is a run's invocation.
type Run struct {
	Command   []string
	Image     *string
	Backend   *string
	Profile   string
	NoNetwork bool
	Fast      bool
	Keep      bool
}

// Exec is an exec's invocation.
type Exec struct {
	Name    string
	Command []string
	Env     []string
	Workdir *string
	Sudo    bool
}

// Outcome is how the command ended.
type Outcome struct {
	ExitCode     int32
	Success      bool
	OutputSHA256 string
	OutputBytes  uint64
	Error        *string
}

// Signature is a receipt's Ed25519 signature over its payload.
type Signature struct {
	Algorithm string
	// KeyID is the first 16 hex digits of the SHA-256 of PublicKey's
	// bytes.
	KeyID string
	// PublicKey and Signature are standard base64.
	PublicKey string
	Signature string
}

// NewOutcome is the outcome of a command that ended with exitCode,
// whose combined output had the SHA-256 sum and size given; errText is
// agentkernel's error, "" for none.
func NewOutcome(exitCode int, sum [sha256.Size]byte, size uint64, errText string) Outcome {
	o := Outcome{ExitCode: int32(exitCode), Success: exitCode == 0, OutputSHA256: hex.EncodeToString(sum[:]), OutputBytes: size}
	if errText != "" {
		o.Error = &errText
	}
	return o
}

// New makes the receipt of inv and out, recorded at now, with a fresh
// UUID v7 as its id, signed with key (nil: unsigned).
func New(inv Invocation, out Outcome, now time.Time, key ed25519.PrivateKey) (*Receipt, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("receipt id: %w", err)
	}
	r := &Receipt{Version: Version, ReceiptID: id.String(), RecordedAt: FormatTime(now), Invocation: inv, Outcome: out}
	if err := r.Seal(key); err != nil {
		return nil, err
	}
	return r, nil
}

// Seal sets r's payload hash and, with a key, its signature.
func (r *Receipt) Seal(key ed25519.PrivateKey) error {
	payload, err := r.Payload()
	if err != nil {
		return err
	}
	r.PayloadHashSHA256 = hashHex(payload)
	r.Signature = nil
	if key != nil {
		pub := key.Public().(ed25519.PublicKey)
		r.Signature = &Signature{
			Algorithm: "ed25519",
			KeyID:     KeyID(pub),
			PublicKey: base64.StdEncoding.EncodeToString(pub),
			Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(key, payload)),
		}
	}
	return nil
}

// FormatTime writes t as upstream's recorded_at: RFC 3339 in UTC with
// the offset written +00:00 and the fraction of a second in 0, 3, 6 or
// 9 digits, as few as hold it.
func FormatTime(t time.Time) string {
	t = t.UTC()
	s := t.Format("2006-01-02T15:04:05")
	ns := t.Nanosecond()
	switch {
	case ns == 0:
	case ns%1_000_000 == 0:
		s += fmt.Sprintf(".%03d", ns/1_000_000)
	case ns%1_000 == 0:
		s += fmt.Sprintf(".%06d", ns/1_000)
	default:
		s += fmt.Sprintf(".%09d", ns)
	}
	return s + "+00:00"
}

// KeyID is the key id of pub: the first 16 hex digits of its SHA-256.
func KeyID(pub []byte) string { return hashHex(pub)[:16] }

func hashHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// ErrVerify marks a receipt that failed verification (as opposed to one
// that could not be read).
var ErrVerify = errors.New("receipt verification failed")

// verifyError is a verification failure in upstream's words.
type verifyError struct{ msg string }

func (e *verifyError) Error() string        { return e.msg }
func (e *verifyError) Is(target error) bool { return target == ErrVerify }

func failf(format string, args ...any) error { return &verifyError{fmt.Sprintf(format, args...)} }

// Verify checks r: its version, its payload hash, and its signature, or,
// for an unsigned receipt, that allowUnsigned was given. Every failure
// is ErrVerify, in upstream's words.
func Verify(r *Receipt, allowUnsigned bool) error {
	if r.Version != Version {
		return failf("Unsupported receipt version %d (expected %d)", r.Version, Version)
	}
	payload, err := r.Payload()
	if err != nil {
		return failf("Failed to serialize receipt payload: %v", err)
	}
	if want := hashHex(payload); want != r.PayloadHashSHA256 {
		return failf("Receipt hash mismatch: expected %s, found %s", want, r.PayloadHashSHA256)
	}
	if r.Signature == nil {
		if !allowUnsigned {
			return failf("Receipt is unsigned. Pass --allow-unsigned to verify legacy receipts.")
		}
		return nil
	}
	s := r.Signature
	if !strings.EqualFold(s.Algorithm, "ed25519") {
		return failf("Unsupported signature algorithm '%s'; expected ed25519", s.Algorithm)
	}
	pub, err := base64.StdEncoding.Strict().DecodeString(s.PublicKey)
	if err != nil {
		return failf("Invalid base64 public key in receipt signature")
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(s.Signature)
	if err != nil {
		return failf("Invalid base64 signature bytes in receipt signature")
	}
	if want := KeyID(pub); want != s.KeyID {
		return failf("Signature key ID mismatch: expected %s, found %s", want, s.KeyID)
	}
	if len(pub) != ed25519.PublicKeySize || len(sig) != ed25519.SignatureSize || !ed25519.Verify(ed25519.PublicKey(pub), payload, sig) {
		return failf("Invalid receipt signature")
	}
	return nil
}

// ReplayArgs is the command line (without the program) that replays r's
// invocation: upstream's, with an exec's NAME after its flags.
func ReplayArgs(r *Receipt) []string {
	switch {
	case r.Invocation.Run != nil:
		run := r.Invocation.Run
		args := []string{"run"}
		if run.Image != nil {
			args = append(args, "--image", *run.Image)
		}
		if run.Backend != nil {
			args = append(args, "-B", *run.Backend)
		}
		if run.Fast {
			args = append(args, "--fast")
		}
		if run.Keep {
			args = append(args, "--keep")
		}
		if run.NoNetwork {
			args = append(args, "--no-network")
		}
		args = append(args, "--profile", run.Profile, "--")
		return append(args, run.Command...)
	case r.Invocation.Exec != nil:
		// Upstream puts NAME first; exec's flags end at NAME here, so it
		// comes after them.
		ex := r.Invocation.Exec
		args := []string{"exec"}
		for _, e := range ex.Env {
			args = append(args, "--env", e)
		}
		if ex.Workdir != nil {
			args = append(args, "--workdir", *ex.Workdir)
		}
		if ex.Sudo {
			args = append(args, "--sudo")
		}
		args = append(args, ex.Name, "--")
		return append(args, ex.Command...)
	}
	return nil
}

// Summary is the lines verify prints about a verified receipt.
func Summary(r *Receipt) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Receipt %s verified\n", r.ReceiptID)
	fmt.Fprintf(&b, "  recorded:  %s\n", r.RecordedAt)
	fmt.Fprintf(&b, "  mode:      %s\n", r.Invocation.Mode)
	var cmd []string
	switch {
	case r.Invocation.Run != nil:
		cmd = r.Invocation.Run.Command
	case r.Invocation.Exec != nil:
		fmt.Fprintf(&b, "  sandbox:   %s\n", r.Invocation.Exec.Name)
		cmd = r.Invocation.Exec.Command
	}
	q := make([]string, len(cmd))
	for i, c := range cmd {
		q[i] = strconv.Quote(c)
	}
	fmt.Fprintf(&b, "  command:   %s\n", strings.Join(q, " "))
	fmt.Fprintf(&b, "  exit code: %d\n", r.Outcome.ExitCode)
	fmt.Fprintf(&b, "  output:    %d bytes, sha256 %s\n", r.Outcome.OutputBytes, r.Outcome.OutputSHA256)
	if r.Outcome.Error != nil {
		fmt.Fprintf(&b, "  error:     %s\n", *r.Outcome.Error)
	}
	if r.Signature != nil {
		fmt.Fprintf(&b, "  signed:    %s key %s\n", r.Signature.Algorithm, r.Signature.KeyID)
	} else {
		b.WriteString("  signed:    no (unsigned receipt accepted by --allow-unsigned)\n")
	}
	return b.String()
}

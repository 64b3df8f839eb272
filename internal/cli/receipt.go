package cli

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/audit"
	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/receipt"
)

// receiptIssuer is runcli's ReceiptIssuer: package receipt, the signing
// key under the user's home, the audit log of the data directory.
type receiptIssuer struct {
	a   *App
	key ed25519.PrivateKey
}

var _ runcli.ReceiptIssuer = (*receiptIssuer)(nil)

// Prepare checks file (not a symbolic link, not a directory) and loads
// or makes the signing key.
func (r *receiptIssuer) Prepare(file string) error {
	if st, err := os.Lstat(file); err == nil {
		if st.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("--receipt %s: is a symbolic link, which is not followed; name another file", file)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("--receipt %s: exists and is not a regular file", file)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("--receipt %s: %w", file, err)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return fmt.Errorf("receipt signing key: %w", err)
	}
	key, err := receipt.LoadOrCreateKey(home)
	if err != nil {
		return err
	}
	r.key = key
	return nil
}

// Issue writes rec's receipt and its audit entry.
func (r *receiptIssuer) Issue(rec runcli.ReceiptRecord) error {
	var inv receipt.Invocation
	opt := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	cmd := append([]string{}, rec.Command...)
	if rec.Exec {
		env := append([]string{}, rec.Env...)
		inv = receipt.Invocation{Mode: receipt.ModeExec, Exec: &receipt.Exec{Name: rec.Name, Command: cmd, Env: env, Workdir: opt(rec.Workdir), Sudo: rec.Sudo}}
	} else {
		profile := rec.Profile
		if profile == "" {
			profile = "moderate"
		}
		inv = receipt.Invocation{Mode: receipt.ModeRun, Run: &receipt.Run{Command: cmd, Image: opt(rec.Image), Backend: opt(rec.Backend), Profile: profile, NoNetwork: rec.NoNetwork, Fast: rec.Fast, Keep: rec.Keep}}
	}
	out := receipt.NewOutcome(rec.ExitCode, rec.OutputSHA256, rec.OutputBytes, rec.Error)
	rc, err := receipt.New(inv, out, time.Now(), r.key)
	if err != nil {
		return err
	}
	if err := receipt.Write(rec.File, rc); err != nil {
		return err
	}
	file := rec.File
	if abs, err := filepath.Abs(file); err == nil {
		file = abs
	}
	code := rec.ExitCode
	e := audit.Entry{
		Sandbox:  rec.Name,
		Action:   audit.ActionReceiptIssued,
		Command:  rec.Command,
		ExitCode: &code,
		Who:      runcli.Who("cli"),
		Details:  fmt.Sprintf("receipt %s (%s) written to %s, payload sha256 %s", rc.ReceiptID, inv.Mode, file, rc.PayloadHashSHA256),
	}
	if err := audit.New(r.a.DataDir).Append(e); err != nil {
		r.a.Warnf("audit log: %v", err)
	}
	return nil
}

const receiptLong = `Signed execution receipts: 'run --receipt FILE' and 'exec --receipt FILE'
write one for the command they ran. A receipt says what ran (the command,
and a run's image, backend, profile and --no-network, --fast, --keep, or an
exec's sandbox, --env, --workdir and --sudo), when, how it ended (exit code,
agentkernel's error) and the SHA-256 and size of its combined output (all of
stdout, then all of stderr). Its payload is hashed and signed with Ed25519;
the signing key is made on first use at
~/.agentkernel/receipts/ed25519_signing_key.pkcs8 (PKCS#8 DER, 0600, in a
0700 directory; a key open to other users is refused). Receipts are
upstream agentkernel's format, byte for byte: each tool verifies the
other's.

A receipt run never goes through the daemon: its output must pass through
agentkernel to be hashed. Each receipt written is a receipt_issued entry
of the audit log ('agentkernel audit').`

func newReceiptCmd(a *App) *cobra.Command {
	c := &cobra.Command{
		Use:   "receipt",
		Short: "Verify and replay signed execution receipts (run/exec --receipt FILE)",
		Long:  receiptLong,
		Example: `  agentkernel run --receipt build.receipt.json -- make test
  agentkernel exec dev --receipt step.json -- pytest -q
  agentkernel receipt verify build.receipt.json
  agentkernel receipt replay build.receipt.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	c.AddCommand(newReceiptVerifyCmd(a), newReceiptReplayCmd(a))
	return c
}

func newReceiptVerifyCmd(a *App) *cobra.Command {
	var allowUnsigned bool
	c := &cobra.Command{
		Use:   "verify FILE",
		Short: "Check a receipt's hash and signature",
		Long: `Check a receipt: its version (1), its payload hash, and its Ed25519
signature with the public key it carries (whose key id must match). An
unsigned receipt fails unless --allow-unsigned. On success a summary is
printed. Exit status: 0 verified, 1 verification failed (the reason on
stderr), 125 the file cannot be read or is not a receipt.

The signature proves the receipt was made with the key whose id it shows,
and not changed since; compare that key id with your own receipts' (any
receipt you made shows it) to know it was yours.`,
		Example: `  agentkernel receipt verify build.receipt.json
  agentkernel receipt verify --allow-unsigned old.receipt.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := loadReceipt(args[0])
			if err != nil {
				return err
			}
			if err := receipt.Verify(r, allowUnsigned); err != nil {
				return &ExitError{Code: 1, Err: err}
			}
			fmt.Fprint(a.Stdout, receipt.Summary(r))
			return nil
		},
	}
	c.Flags().BoolVar(&allowUnsigned, "allow-unsigned", false, "accept a receipt without a signature (its hash is still checked)")
	return c
}

// loadReceipt reads a receipt file; one that cannot be read or is not a
// receipt is exit status 125.
func loadReceipt(path string) (*receipt.Receipt, error) {
	r, err := receipt.Load(path)
	if err != nil {
		return nil, &ExitError{Code: ExitAgentkernel, Err: err}
	}
	return r, nil
}

func newReceiptReplayCmd(a *App) *cobra.Command {
	var allowUnsigned bool
	c := &cobra.Command{
		Use:   "replay FILE",
		Short: "Run a receipt's command again and compare the outcome",
		Long: `Run the invocation a receipt records again, as

  agentkernel run [--image I] [-B B] [--fast] [--keep] [--no-network] --profile P -- COMMAND...
  agentkernel exec [--env K=V]... [--workdir W] [--sudo] NAME -- COMMAND...

in the current directory, with its output on this terminal, then compare
its exit code and the SHA-256 of its combined output with the receipt's.
The receipt is verified first (as 'receipt verify'; --allow-unsigned for
an unsigned one): a receipt that fails is not replayed.

Exit status: 0 when the exit code and the output match; otherwise the
replayed command's exit code, or 1 when it succeeded but does not match;
125 when the receipt cannot be read, does not verify, or agentkernel failed.`,
		Example: `  agentkernel receipt replay build.receipt.json
  agentkernel receipt replay --allow-unsigned old.receipt.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := loadReceipt(args[0])
			if err != nil {
				return err
			}
			if err := receipt.Verify(r, allowUnsigned); err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("%s does not verify: %w", args[0], err)}
			}
			return a.replay(r)
		},
	}
	c.Flags().BoolVar(&allowUnsigned, "allow-unsigned", false, "replay a receipt without a signature")
	return c
}

// replay runs r's invocation with this binary and compares.
func (a *App) replay(r *receipt.Receipt) error {
	if ex := r.Invocation.Exec; ex != nil {
		// The name comes first, where a flag could otherwise hide.
		if err := config.ValidateSandboxName(ex.Name); err != nil {
			return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("receipt's sandbox name: %w", err)}
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	argv := []string{"--data-dir", a.DataDir}
	if a.ConfigPath != "" {
		argv = append(argv, "--config", a.ConfigPath)
	}
	if a.Quiet {
		argv = append(argv, "--quiet")
	}
	argv = append(argv, receipt.ReplayArgs(r)...)
	a.Infof("agentkernel: replaying receipt %s: agentkernel %s", r.ReceiptID, strings.Join(receipt.ReplayArgs(r), " "))
	tee, err := runcli.NewOutputTee(a.Stdout, a.Stderr)
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	c := exec.Command(exe, argv...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, tee.Stdout(), tee.Stderr()
	runErr := c.Run()
	sum, size, err := tee.Sum()
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	code := 0
	if runErr != nil {
		var ee *exec.ExitError
		if !errors.As(runErr, &ee) {
			return &ExitError{Code: ExitAgentkernel, Err: runErr}
		}
		code = ee.ExitCode()
		if code < 0 {
			code = ExitAgentkernel
		}
	}
	gotHash := hex.EncodeToString(sum[:])
	same := true
	if int32(code) == r.Outcome.ExitCode {
		fmt.Fprintf(a.Stderr, "agentkernel: replay: exit code %d, as recorded\n", code)
	} else {
		same = false
		fmt.Fprintf(a.Stderr, "agentkernel: replay: exit code %d, recorded %d\n", code, r.Outcome.ExitCode)
	}
	if gotHash == r.Outcome.OutputSHA256 {
		fmt.Fprintf(a.Stderr, "agentkernel: replay: output matches (%d bytes, sha256 %s)\n", size, gotHash)
	} else {
		same = false
		fmt.Fprintf(a.Stderr, "agentkernel: replay: output differs: %d bytes, sha256 %s; recorded %d bytes, sha256 %s\n", size, gotHash, r.Outcome.OutputBytes, r.Outcome.OutputSHA256)
	}
	switch {
	case same:
		return nil
	case code != 0:
		return &ExitError{Code: code}
	}
	return &ExitError{Code: 1}
}

package runcli

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"
)

// ReceiptIssuer writes the signed execution receipts of runs and execs
// given --receipt FILE (agentkernel-full's, cli/receipt.go, over package
// receipt). Nil in App: such a command line answers ErrNeedsFull.
type ReceiptIssuer interface {
	// Prepare checks, before the command runs, that a receipt can be
	// written to file and signed (the signing key, made on first use).
	Prepare(file string) error
	// Issue writes the receipt of rec and audits it.
	Issue(rec ReceiptRecord) error
}

// ReceiptRecord is what a receipt says: the invocation (a run's, or an
// exec's when Exec), its outcome and the output's hash.
type ReceiptRecord struct {
	File string
	Exec bool
	// Command is the command's argv.
	Command []string
	// A run's: Image and Backend ("" for none), Profile, and its
	// --no-network, --fast and --keep.
	Image, Backend        string
	Profile               string
	NoNetwork, Fast, Keep bool
	// An exec's: the sandbox, its --env, --workdir ("" for none) and
	// --sudo.
	Name    string
	Env     []string
	Workdir string
	Sudo    bool
	// ExitCode is the command's status, agentkernel's (125, …) when it
	// failed itself; Error says why then ("" for none).
	ExitCode int
	Error    string
	// OutputSHA256 and OutputBytes are the combined output's
	// (OutputTee).
	OutputSHA256 [sha256.Size]byte
	OutputBytes  uint64
}

// OutputTee passes a command's stdout and stderr on to the writers it
// was made with, as they come, and hashes the combined output: all of
// stdout, then all of stderr (stderr is kept in an unlinked temporary
// file meanwhile), so that the hash does not depend on how the two
// streams interleaved.
type OutputTee struct {
	stdout, stderr teeWriter
	spool          *os.File
	outHash        hash.Hash
	size           uint64
	mu             sync.Mutex
	err            error
}

type teeWriter struct {
	t      *OutputTee
	dst    io.Writer
	stderr bool
}

// NewOutputTee makes an OutputTee writing to stdout and stderr.
func NewOutputTee(stdout, stderr io.Writer) (*OutputTee, error) {
	f, err := os.CreateTemp("", "agentkernel-output-*")
	if err != nil {
		return nil, fmt.Errorf("receipt: output spool: %w", err)
	}
	os.Remove(f.Name())
	t := &OutputTee{spool: f, outHash: sha256.New()}
	t.stdout = teeWriter{t: t, dst: stdout}
	t.stderr = teeWriter{t: t, dst: stderr, stderr: true}
	return t, nil
}

// Stdout and Stderr are the writers to give the command.
func (t *OutputTee) Stdout() io.Writer { return &t.stdout }
func (t *OutputTee) Stderr() io.Writer { return &t.stderr }

func (w *teeWriter) Write(p []byte) (int, error) {
	t := w.t
	t.mu.Lock()
	t.size += uint64(len(p))
	if w.stderr {
		if _, err := t.spool.Write(p); err != nil && t.err == nil {
			t.err = fmt.Errorf("receipt: output spool: %w", err)
		}
	} else {
		t.outHash.Write(p)
	}
	t.mu.Unlock()
	return w.dst.Write(p)
}

// Sum is the combined output's SHA-256 and size, once the command has
// ended; it closes t.
func (t *OutputTee) Sum() ([sha256.Size]byte, uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var sum [sha256.Size]byte
	defer t.spool.Close()
	if t.err != nil {
		return sum, 0, t.err
	}
	if _, err := t.spool.Seek(0, io.SeekStart); err != nil {
		return sum, 0, err
	}
	if _, err := io.Copy(t.outHash, t.spool); err != nil {
		return sum, 0, fmt.Errorf("receipt: output spool: %w", err)
	}
	copy(sum[:], t.outHash.Sum(nil))
	return sum, t.size, nil
}

// Close drops t without a sum.
func (t *OutputTee) Close() { t.spool.Close() }

// issueReceipt finishes rec with the command's outcome (runErr, as the
// command returned it) and the tee's sum, issues it, and returns runErr
// (or the receipt's failure when the command succeeded).
func (a *App) issueReceipt(rec ReceiptRecord, tee *OutputTee, runErr error) error {
	sum, size, err := tee.Sum()
	if errors.Is(runErr, ErrNeedsFull) {
		return runErr
	}
	if err == nil {
		rec.OutputSHA256, rec.OutputBytes = sum, size
		rec.ExitCode, rec.Error = 0, ""
		if runErr != nil {
			rec.ExitCode, rec.Error = ExitAgentkernel, runErr.Error()
			var ee *ExitError
			if errors.As(runErr, &ee) {
				rec.ExitCode, rec.Error = ee.Code, ""
				if ee.Err != nil {
					rec.Error = ee.Err.Error()
				}
			}
		}
		err = a.Receipts.Issue(rec)
	}
	if err == nil {
		return runErr
	}
	if runErr != nil {
		a.Warnf("%v", err)
		return runErr
	}
	return &ExitError{Code: ExitAgentkernel, Err: err}
}

// prepareReceipt checks file before the command runs (ErrNeedsFull
// without an issuer).
func (a *App) prepareReceipt(file string) error {
	if a.Receipts == nil {
		return ErrNeedsFull
	}
	if err := a.Receipts.Prepare(file); err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	return nil
}

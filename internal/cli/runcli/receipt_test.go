package runcli

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"
)

// TestOutputTee: the output reaches its writers as it comes; the hash is
// of all of stdout, then all of stderr, however they interleaved.
func TestOutputTee(t *testing.T) {
	var out, errb bytes.Buffer
	tee, err := NewOutputTee(&out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	tee.Stderr().Write([]byte("e1 "))
	tee.Stdout().Write([]byte("o1 "))
	tee.Stderr().Write([]byte("e2"))
	tee.Stdout().Write([]byte("o2"))
	if out.String() != "o1 o2" || errb.String() != "e1 e2" {
		t.Fatalf("passed on: %q %q", out.String(), errb.String())
	}
	sum, n, err := tee.Sum()
	if err != nil || sum != sha256.Sum256([]byte("o1 o2e1 e2")) || n != 10 {
		t.Fatalf("sum: %x %d %v", sum, n, err)
	}
}

type recordIssuer struct{ got ReceiptRecord }

func (r *recordIssuer) Prepare(string) error { return nil }
func (r *recordIssuer) Issue(rec ReceiptRecord) error {
	r.got = rec
	return nil
}

// TestIssueReceiptOutcome: the exit code and error a receipt records
// for each way a command ends.
func TestIssueReceiptOutcome(t *testing.T) {
	for _, c := range []struct {
		err  error
		code int
		text string
	}{
		{nil, 0, ""},
		{&ExitError{Code: 3}, 3, ""},
		{&ExitError{Code: 124, Err: errors.New("ran past --timeout")}, 124, "ran past --timeout"},
		{errors.New("boom"), 125, "boom"},
	} {
		is := &recordIssuer{}
		a := &App{Receipts: is}
		tee, _ := NewOutputTee(&bytes.Buffer{}, &bytes.Buffer{})
		if got := a.issueReceipt(ReceiptRecord{File: "f"}, tee, c.err); got != c.err {
			t.Errorf("%v: returned %v", c.err, got)
		}
		if is.got.ExitCode != c.code || is.got.Error != c.text || is.got.File != "f" {
			t.Errorf("%v: recorded %+v", c.err, is.got)
		}
	}
}

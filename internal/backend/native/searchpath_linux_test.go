package native

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSearchPathNotFound: a name on no directory of PATH is ENOENT (exit
// 127 through sandbox.ExecErrno), said once: the message names the
// command and $PATH and does not repeat the errno's own words, which the
// caller follows with "command not found".
func TestSearchPathNotFound(t *testing.T) {
	_, err := searchPath("nosuch", []string{"PATH=/a:/b"}, func(string) (bool, bool) { return false, false })
	if !errors.Is(err, unix.ENOENT) {
		t.Fatalf("err = %v, want ENOENT", err)
	}
	if got, want := err.Error(), "nosuch: executable file not found in $PATH"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	_, err = searchPath("locked", []string{"PATH=/a"}, func(string) (bool, bool) { return true, false })
	if !errors.Is(err, unix.EACCES) {
		t.Fatalf("not executable: %v, want EACCES", err)
	}
}

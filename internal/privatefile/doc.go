// Package privatefile reads the files agentkernel keeps private to the
// user (the secret vault and its key, the receipt signing key) and checks
// the directories that hold them: never through a symbolic link, only a
// regular file or a directory of the effective user, closed to group and
// others, and of a bounded size. Its refusals say what to run to fix the
// file (chmod, chown) and keep the path.
package privatefile

import "fmt"

// Kind is what is wrong with a refused file.
type Kind int

const (
	// Insecure: a symbolic link, not a regular file or directory, another
	// user's, or open to group or others.
	Insecure Kind = iota + 1
	// TooLarge: larger than the caller's bound.
	TooLarge
)

// Error is a refusal: Msg names the file (by what the caller calls it)
// and the way to fix it.
type Error struct {
	Kind Kind
	Path string
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func refuse(kind Kind, path, format string, args ...any) error {
	return &Error{Kind: kind, Path: path, Msg: fmt.Sprintf(format, args...)}
}

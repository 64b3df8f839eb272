//go:build unix

package secrets

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/privatefile"
)

// checkDir checks the secrets directory (privatefile.Dir): a directory of
// the effective user, closed to group and others, made when create.
func checkDir(dir string, create bool) error {
	return fromPrivate(privatefile.Dir(dir, "secrets directory", create), nil)
}

// readPrivate reads one of the secrets files (privatefile.Read); what
// names it ("vault"), and a file larger than max is an error of kind
// tooLarge.
func readPrivate(path, what string, max int64, tooLarge error) ([]byte, error) {
	b, err := privatefile.Read(path, "secrets "+what, max)
	return b, fromPrivate(err, tooLarge)
}

// fromPrivate gives privatefile's refusals this package's kinds.
func fromPrivate(err, tooLarge error) error {
	var pe *privatefile.Error
	if !errors.As(err, &pe) {
		return err
	}
	kind := ErrInsecure
	if pe.Kind == privatefile.TooLarge && tooLarge != nil {
		kind = tooLarge
	}
	return &Error{Kind: kind, Path: pe.Path, msg: pe.Msg}
}

// lockFile takes an exclusive flock on path (made 0600 if missing) and
// returns its release. flock locks belong to the open file, so two
// Vaults in one process exclude each other as two processes do.
func lockFile(path string) (func(), error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0o600)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, insecure(path, fmt.Sprintf("the secrets lock file %s is a symbolic link: remove it", path))
	case err != nil:
		return nil, fmt.Errorf("opening the secrets lock file %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("the secrets lock file %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, insecure(path, fmt.Sprintf("the secrets lock file %s is not a regular file: remove it", path))
	}
	if err := fromPrivate(privatefile.CheckOwner(path, "secrets lock file", &st, "600"), nil); err != nil {
		f.Close()
		return nil, err
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking the secrets vault (%s): %w", path, err)
	}
	return func() { f.Close() }, nil
}

func insecure(path, msg string) error {
	return &Error{Kind: ErrInsecure, Path: path, msg: msg}
}

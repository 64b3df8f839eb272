package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// serveManager is the Manager behind the HTTP API: ephemeral runs and
// persistent sandboxes, audited as "via api".
func (a *App) serveManager() (*sandbox.Manager, func(), error) {
	return a.sandboxesFor("api")
}

// maxSocketPath is the longest path a unix socket address holds.
const maxSocketPath = len(unix.RawSockaddrUnix{}.Path) - 1

// listenUnixSocket listens on a new unix socket at path, mode 0600 from
// the start. It replaces nothing but a stale socket (one nobody answers
// on); the server's peer check (package api) is what keeps other users
// out, whatever the file's mode becomes later.
func listenUnixSocket(path string) (net.Listener, error) { return listenUnix(path, nil) }

// listenUnix is listenUnixSocket; afterBind, when set, runs right after
// the socket is bound (tests: what a user who can write the directory
// might do then).
//
// The mode comes from the umask at bind(2), never from a chmod after it:
// a path is not a file descriptor, and whoever can write the directory
// could have replaced the socket by a symbolic link to another file in
// between, which a chmod would follow.
func listenUnix(path string, afterBind func()) (net.Listener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("socket path %s is too long (%d bytes; a unix socket path holds at most %d)", path, len(path), maxSocketPath)
	}
	if err := clearStaleSocket(path); err != nil {
		return nil, err
	}
	old := unix.Umask(0o177)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	if afterBind != nil {
		afterBind()
	}
	// What is at path now must be the socket just made, 0600.
	fi, err := os.Lstat(path)
	if err == nil && (fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600) {
		err = fmt.Errorf("%s was replaced while the server started (now %v): not serving on it", path, fi.Mode())
	}
	if err != nil {
		// Not ours (any more): closing must not remove what is there.
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// clearStaleSocket removes a socket at path that no server answers on,
// and refuses anything else that is there.
func clearStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket: not replacing it", path)
	}
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s is in use: a server answers on it", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%s exists and cannot be checked (%v): not replacing it", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("removing the stale socket: %w", err)
	}
	return nil
}

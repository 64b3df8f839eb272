package api

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerUID is the effective uid of the process that connected c, as the
// kernel recorded it at connect time (SO_PEERCRED).
func peerUID(c *net.UnixConn) (int, bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, false
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || serr != nil || cred == nil {
		return -1, false
	}
	return int(cred.Uid), true
}

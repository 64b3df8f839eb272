package api

import (
	"net"

	"github.com/agentkernel/agentkernel/internal/peercred"
)

// peerOf is the process that connected c, as the kernel recorded it at
// connect time: its effective uid (SO_PEERCRED) and whether it runs in
// the server's own user and PID namespaces (not inside a sandbox, whose
// user namespace can map its ids to the server's uid). ok is false when
// not even the uid can be read.
func peerOf(c *net.UnixConn) (uid int, ownNS, ok bool) {
	p, err := peercred.Of(c)
	if err != nil {
		return -1, false, false
	}
	return p.UID, p.OwnNS, true
}

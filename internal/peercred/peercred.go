// Package peercred says who is at the other end of a unix socket: the uid
// the kernel recorded when the peer connected (SO_PEERCRED) and whether
// the peer runs in this process's user and PID namespaces.
//
// The namespaces matter because a sandboxed process can have the same
// uid: a rootless sandbox's user namespace maps its ids to the caller's,
// so SO_PEERCRED reports the caller's uid for a process inside it. A
// socket that lets its owner in without a key (the API's unix sockets,
// the daemon's run socket) must therefore also ask whether the peer is
// in the owner's own namespaces, or a sandbox that can reach the socket
// file (a workspace, a volume) gets the owner's access.
package peercred

import "errors"

// Peer is what the kernel says about a unix socket's peer.
type Peer struct {
	// UID is the peer's effective uid when it connected, as this
	// process's user namespace sees it.
	UID int
	// PID is the peer's pid in this process's PID namespace (0 when it
	// has none there).
	PID int
	// OwnNS: the peer is in this process's user and PID namespaces.
	// False when it is not, and when that could not be established
	// (NSErr says why).
	OwnNS bool
	// NSErr is why OwnNS is false.
	NSErr error
}

// ErrOtherNamespace: the peer runs in another user or PID namespace than
// this process (inside a sandbox or a container).
var ErrOtherNamespace = errors.New("the peer runs in another user or PID namespace")
